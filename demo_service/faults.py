"""Faults armed per named call: the network failures a client of a real API meets.

A fault is armed for an operation (and optionally one key) through POST /_faults and is taken
by the next matching request. ERROR answers before anything is committed; DROP and DELAY act
after the request's transaction has committed, which is the case a client cannot tell from
"nothing happened". Being down is not a fault here: the process is stopped
(demo_service.process.ServiceProcess.stop), so connections are refused.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.http import HttpRequest

from demo_service.models import Fault, Operation

MAX_DELAY_SECONDS = 60.0


class InvalidFault(ValueError):
    pass


def arm(spec: dict[str, Any]) -> Fault:
    """Validate a fault spec ({"op", "mode", "key"?, "seconds"?, "status"?, "times"?})."""
    unknown = set(spec) - {"op", "mode", "key", "seconds", "status", "times"}
    if unknown:
        raise InvalidFault(f"unknown field(s): {', '.join(sorted(unknown))}")
    op = spec.get("op")
    if op not in Operation.values:
        raise InvalidFault(f"op must be one of {', '.join(Operation.values)}, not {op!r}")
    mode = spec.get("mode")
    if mode not in Fault.Mode.values:
        raise InvalidFault(f"mode must be one of {', '.join(Fault.Mode.values)}, not {mode!r}")
    key = spec.get("key", "")
    if not isinstance(key, str) or len(key) > 255:
        raise InvalidFault("key must be a string of at most 255 characters")
    seconds = spec.get("seconds", 0)
    if mode == Fault.Mode.DELAY and (
        not isinstance(seconds, int | float) or not 0 < seconds <= MAX_DELAY_SECONDS
    ):
        raise InvalidFault(f"a delay needs seconds between 0 and {MAX_DELAY_SECONDS:g}")
    status = spec.get("status", 503)
    if not isinstance(status, int) or not 500 <= status <= 599:
        raise InvalidFault("status must be a 5xx code")
    times = spec.get("times", 1)
    if not isinstance(times, int) or not 1 <= times <= 1000:
        raise InvalidFault("times must be between 1 and 1000")
    return Fault.objects.create(
        operation=op, key=key, mode=mode, seconds=seconds or 0, status=status, remaining=times
    )


def take(operation: str, key: str) -> Fault | None:
    """The oldest armed fault for this operation and key (or any key), used up by one."""
    with transaction.atomic():
        fault = (
            Fault.objects.select_for_update()
            .filter(operation=operation, remaining__gt=0)
            .filter(Q(key="") | Q(key=key))
            .order_by("pk")
            .first()
        )
        if fault is not None:
            Fault.objects.filter(pk=fault.pk).update(remaining=F("remaining") - 1)
    return fault


def after_commit(fault: Fault | None, request: HttpRequest) -> None:
    """Apply a DROP or DELAY fault once the request's work is committed."""
    if fault is None:
        return
    if fault.mode == Fault.Mode.DELAY:
        time.sleep(fault.seconds)
    elif fault.mode == Fault.Mode.DROP:
        drop_connection(request)


def drop_connection(request: HttpRequest) -> None:
    """Close the client's connection without a response, as a crashed server or a proxy that
    lost its upstream would. gunicorn then fails to write the response, which it ignores."""
    sock = request.META.get("gunicorn.socket")
    if sock is None:
        raise RuntimeError("dropping a connection needs the service to run under gunicorn")
    sock.shutdown(socket.SHUT_RDWR)

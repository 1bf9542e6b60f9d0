"""How one create request is handled: faults, Idempotency-Key, execution, meter.

Like a payment API: the first request with a key is executed and its answer stored in the
same transaction; the same key with the same request (method, path, JSON body) gets the stored
answer back with `Idempotent-Replayed: true`; the same key with a different request gets 409
and nothing is executed. Requests without a key, and operations that do not honour keys (the
platform), are executed every time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse

from demo_service import faults
from demo_service.models import (
    KEYED_OPERATIONS,
    Fault,
    IdempotentResponse,
    MeterEntry,
    Operation,
)

KEY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
KEY_REUSED = "key reused with a different request"


class Invalid(ValueError):
    """The request is malformed: 400, nothing executed, nothing stored."""


class Declined(Exception):
    """The request is valid but the system refuses it (a card over its limit): 402, nothing
    executed, nothing stored (the same key may be sent again once the limit allows it)."""


# perform(body, key) -> (the created object as JSON, its cost)
Perform = Callable[[dict[str, Any], str], tuple[dict[str, Any], Any]]


def error(status: int, kind: str, message: str, key: str = "") -> JsonResponse:
    response = JsonResponse({"error": {"type": kind, "message": message}}, status=status)
    if key:
        response[KEY_HEADER] = key
    return response


def fingerprint(request: HttpRequest, body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{request.method} {request.path}\n{canonical}".encode()).hexdigest()


def parse_body(request: HttpRequest) -> dict[str, Any]:
    try:
        body = json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise Invalid(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise Invalid("the body must be a JSON object")
    return body


def meter(operation: str, key: str, outcome: str, cost: Any = 0) -> None:
    MeterEntry.objects.create(operation=operation, key=key, outcome=outcome, cost=cost)


def handle_create(request: HttpRequest, operation: Operation, perform: Perform) -> JsonResponse:
    key = request.headers.get(KEY_HEADER, "")
    if len(key) > 255:
        return error(400, "invalid_request", f"{KEY_HEADER} is longer than 255 characters")
    try:
        body = parse_body(request)
    except Invalid as exc:
        meter(operation, key, MeterEntry.Outcome.INVALID)
        return error(400, "invalid_request", str(exc), key)
    # The platform ignores the header; its faults (and lookups) go by the body's delivery key.
    call_key = key or str(body.get("delivery_key", ""))
    fault = faults.take(operation, call_key)
    if fault is not None and fault.mode == Fault.Mode.ERROR:
        meter(operation, call_key, MeterEntry.Outcome.REFUSED)
        return error(fault.status, "unavailable", "the service is unavailable, try again", key)
    keyed = bool(key) and operation in KEYED_OPERATIONS
    try:
        response = _execute(request, operation, perform, body, key if keyed else "", call_key)
    except Invalid as exc:
        meter(operation, call_key, MeterEntry.Outcome.INVALID)
        return error(400, "invalid_request", str(exc), key)
    except Declined as exc:
        meter(operation, call_key, MeterEntry.Outcome.DECLINED)
        return error(402, "card_declined", str(exc), key)
    faults.after_commit(fault, request)
    return response


def _execute(
    request: HttpRequest,
    operation: Operation,
    perform: Perform,
    body: dict[str, Any],
    key: str,
    call_key: str,
) -> JsonResponse:
    request_print = fingerprint(request, body)
    for _ in range(2):  # a concurrent first request with the same key: read its answer
        try:
            with transaction.atomic():
                stored = IdempotentResponse.objects.filter(key=key).first() if key else None
                if stored is not None:
                    if stored.fingerprint != request_print:
                        meter(operation, key, MeterEntry.Outcome.CONFLICT)
                        return error(409, "idempotency_key_reused", KEY_REUSED, key)
                    meter(operation, key, MeterEntry.Outcome.REPLAYED)
                    response = JsonResponse(stored.body, status=stored.status)
                    response[KEY_HEADER] = key
                    response[REPLAYED_HEADER] = "true"
                    return response
                created, cost = perform(body, call_key)
                meter(operation, call_key, MeterEntry.Outcome.BILLED, cost)
                if key:
                    IdempotentResponse.objects.create(
                        key=key,
                        operation=operation,
                        fingerprint=request_print,
                        status=201,
                        body=created,
                    )
        except IntegrityError:
            if not key:
                raise
            continue
        response = JsonResponse(created, status=201)
        if key:
            response[KEY_HEADER] = key
            response[REPLAYED_HEADER] = "false"
        return response
    raise IntegrityError(f"{KEY_HEADER} {key!r}: could not store or read its response")


def handle_lookup(
    request: HttpRequest, operation: Operation, key: str, find: Callable[[], Any]
) -> JsonResponse:
    """A reconcile GET: the object as JSON, or 404. Faults apply here too (a platform that
    times out while a plan asks it)."""
    fault = faults.take(operation, key)
    if fault is not None and fault.mode == Fault.Mode.ERROR:
        meter(operation, key, MeterEntry.Outcome.REFUSED)
        return error(fault.status, "unavailable", "the service is unavailable, try again")
    found = find()
    if found is None:
        meter(operation, key, MeterEntry.Outcome.MISSING)
        response = error(404, "not_found", "nothing was delivered under this key")
    else:
        meter(operation, key, MeterEntry.Outcome.FOUND)
        response = JsonResponse(found.as_json())
    faults.after_commit(fault, request)
    return response

"""What the database says about a run, for tests that wait on it or read it."""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.processes import wait_for


def run_status(run: Any) -> str:
    """The run's status as committed now (a Run or its primary key)."""
    from runs.models import Run

    return Run.objects.values_list("status", flat=True).get(pk=getattr(run, "pk", run))


def wait_settled(run: Any, *, timeout: float = 90) -> str:
    """Wait until the run is neither pending, running nor resuming; return its status."""
    from runs.models import Run

    pk = getattr(run, "pk", run)
    return wait_for(
        lambda: (s := run_status(pk)) not in Run.ACTIVE and s,
        timeout=timeout,
        what=f"run-{pk} to stop being active",
    )


def wait_open_gate(run: Any, gate_id: str, *, timeout: float = 180) -> Any:
    """Wait until the run waits at its gate `gate_id` (the run WAITING and the gate OPEN, both
    committed); return the gate."""
    from runs.models import Gate, GateStatus, Run

    pk = getattr(run, "pk", run)
    return wait_for(
        lambda: (
            run_status(pk) == Run.Status.WAITING
            and Gate.objects.filter(run_id=pk, gate_id=gate_id, status=GateStatus.OPEN).first()
        ),
        timeout=timeout,
        what=f"run-{pk} to wait at {gate_id}",
    )


def wait_lease_free(run: Any, *, timeout: float = 60) -> None:
    """Wait until nobody holds the run's lease (released, or run out). A sweeper releases it
    only after the stop's after-commit work; a test that stops the workers first may leave
    it held, and a supervisor's ledger edit would then be refused."""
    from django.db.models.functions import Now

    from runs.models import Lease

    pk = getattr(run, "pk", run)
    wait_for(
        lambda: Lease.objects.filter(run_id=pk, expires_at__lte=Now()).exists(),
        timeout=timeout,
        what=f"the lease of run-{pk} to be free",
    )


def event_of(run_pk: int, type_: str, call: str = "", stage: str = ""):
    """The newest event of a type (for a call, or in a stage), or None."""
    from runs.models import Event

    events = Event.objects.filter(run_id=run_pk, type=type_).order_by("-seq")
    if stage:
        events = events.filter(stage=stage)
    for event in events:
        if not call or event.payload.get("call") == call:
            return event
    return None


def new_account(label: str) -> str:
    """A fresh account per run: the platform's reconcile also matches by content hash within
    an account, so runs of identical content under one account would find each other's
    article. Artifacts do not depend on the account."""
    return f"acct-{label}-{uuid.uuid4().hex[:8]}"[:64]


def another_session_waits_on_a_lock(conn=None) -> bool:
    """Whether another PostgreSQL session of this database waits for a lock (a row lock this
    test holds, say): what a race test waits for before it commits."""
    from django.db import connection

    with (conn or connection).cursor() as cursor:
        # Inside a transaction the activity view is a snapshot taken once; refresh it.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0] > 0

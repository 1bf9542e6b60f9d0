"""Closing a run out: an operator gives up on a stopped run, with a reason. Some runs have no
good way on: a target that refuses every answer a human can give, a run nobody wants any
more, a plan that stays blocked. Without a way out they would stay in the inbox for good.

A close-out is an event in the run's chain (CLOSED_OUT: who, why, the status it left, the
effects whose outcome is still unknown, the gates it closed), and the run's last status
(closed): never resumed, out of the inbox, no plan computed, nobody told. Closing settles
nothing outside: an effect whose outcome is unknown stays unknown on the run's page, for a
supervisor to resolve with the target, and the event lists it.

Stopped means a human was to decide: interrupted, failed, needing approval (deviated or not)
or waiting at a gate, whose open gates are closed with it. A run that is active, finished,
superseded or closed already is refused.
"""

from __future__ import annotations

from django.db import transaction

from runs.events import ClosedOut
from runs.gates import rows as gate_rows
from runs.ledger import leases
from runs.ledger.append import RunMove, Writer, append
from runs.ledger.reasons import checked_reason
from runs.models import Effect, Event, Gate, GateStatus, Run
from runs.planning.replay import UNSETTLED


class CloseRefused(Exception):
    """The run cannot be closed out (it is not stopped); nothing was written."""


class InvalidReason(CloseRefused):
    """The reason is missing or too long; nothing was written."""


def _not_stopped(run: Run) -> str:
    if run.status == Run.Status.CLOSED:
        closed = (
            Event.objects.filter(run=run, type=Event.Type.CLOSED_OUT)
            .values_list("actor", flat=True)
            .first()
        )
        return f"{run.public_id} was closed out already (by {closed or 'someone'})"
    if run.is_active:
        # A pending run waits for its job (or, queued nowhere, for the sweeper to find it
        # lost): no worker holds it yet.
        who = (
            "its stage job is queued or due"
            if run.status == Run.Status.PENDING
            else "a worker owns it"
        )
        return f"{run.public_id} {run.status_said}: {who}; it can be closed out once it stops"
    return f"{run.public_id} {run.status_said}: there is nothing to close"


def close_out(run_pk: int, reason: str, *, actor: str) -> Event:
    """Close the stopped run out with `reason`: CLOSED_OUT, the run closed, its open gates
    closed. Raises InvalidReason or CloseRefused, having written nothing."""
    reason = checked_reason(
        reason,
        missing="say why the run is closed out: the reason is recorded in its chain",
        refused=InvalidReason,
    )
    with transaction.atomic():
        run = Run.locked(run_pk, missing=CloseRefused)
        if not run.is_stopped:
            raise CloseRefused(_not_stopped(run))
        unsettled = [
            {
                "call": f"{e.stage}/{e.call_id}",
                "tool": e.tool,
                "status": e.status,
                "key": e.delivery_key,
            }
            for e in Effect.objects.filter(run=run, status__in=UNSETTLED).order_by("id")
        ]
        waiting = [
            f"{g.stage}/{g.gate_id}"
            for g in Gate.objects.filter(run=run, status=GateStatus.OPEN).order_by("id")
        ]
        # A stopped run holds no lease (an interrupted one's worker is gone): taking it over
        # fences anyone left, as an approval does.
        closed = ClosedOut(
            reason=reason,
            by=actor,
            previous_status=run.status,
            unsettled=unsettled,
            gates_closed=waiting,
        )
        with leases.taken_over(run.pk, actor) as token:
            event = append(
                Writer(run.pk, token, actor),
                closed,
                move=RunMove(Run.Status.CLOSED, ticket="", queued_at=None),
            )
            gate_rows.close_open(run, event)
    return event

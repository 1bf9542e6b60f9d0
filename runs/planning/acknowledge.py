"""Acknowledging a deviation: a run that finished after departing from its approved plan
stays with those that need a human (Run.deviated) until someone reads how it departed and
accepts it, with a reason. The acknowledgement is an event in the run's chain (ACKNOWLEDGED),
so it is as tamper-evident as the deviation it answers; the run then leaves the inbox."""

from __future__ import annotations

from django.db import transaction

from runs.events import Acknowledged
from runs.ledger import leases
from runs.ledger.append import RunMove, Writer, append
from runs.ledger.reasons import checked_reason
from runs.models import Event, Run


class AcknowledgeRefused(Exception):
    """Nothing was written; the message says why."""


def acknowledge(run_pk: int, reason: str, *, actor: str) -> Event:
    """Accept a finished run's deviation. Raises AcknowledgeRefused, having written nothing,
    for a run that did not deviate, is not finished (a stopped one is resumed by approving
    its plan instead) or was acknowledged already."""
    reason = checked_reason(
        reason,
        missing="say why the deviation is acceptable: the reason is recorded",
        refused=AcknowledgeRefused,
    )
    with transaction.atomic():
        run = Run.locked(run_pk, missing=AcknowledgeRefused)
        if not run.deviated:
            raise AcknowledgeRefused(f"{run.public_id} has no deviation to acknowledge")
        if run.status != Run.Status.SUCCEEDED:
            raise AcknowledgeRefused(
                f"{run.public_id} {run.status_said}: a deviation is "
                "acknowledged once the run finished; a stopped run goes on by approving its plan"
            )
        deviation = (
            Event.objects.filter(run=run, type=Event.Type.PLAN_DEVIATED)
            .order_by("-seq")
            .values_list("seq", flat=True)
            .first()
        )
        with leases.taken_over(run.pk, actor) as token:
            event = append(
                Writer(run.pk, token, actor),
                Acknowledged(deviation_seq=deviation, reason=reason, by=actor),
                move=RunMove(deviated=False),
            )
    return event

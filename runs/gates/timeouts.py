"""The sweeper's step for gates (every worker's sweeper thread runs it each interval):

* a gate whose deadline passed applies its on_timeout: the default answer, recorded as given
  by the time-out (HUMAN_ANSWERED, the stage queued again), or a failed run with the reason;
* a gate whose escalation time came (80 % of its timeout) is announced to its escalation
  role once (signals.gate_escalating; notify listens).

Both are compare-and-sets on the database's clock: of several sweepers, one acts and the
others find the gate moved.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models.functions import Now

from runs import signals
from runs.gates import answers
from runs.ledger import gates as gate_rows
from runs.ledger import leases
from runs.ledger.append import Writer
from runs.models import Gate, GateStatus, Run

log = logging.getLogger("runs.gates")


def expire(gate_pk: int) -> bool:
    """Apply the gate's on_timeout if its deadline has passed and it is still open."""
    gate = Gate.objects.filter(pk=gate_pk, status=GateStatus.OPEN, deadline__lte=Now()).first()
    if gate is None:
        return False
    if gate.on_timeout.get("answer") is not None:
        try:
            answers.record(gate.pk, gate.on_timeout["answer"], {}, actor=answers.TIME_OUT)
        except answers.AnswerRefused:
            return False  # answered meanwhile
        log.info("gate %s of run-%s answered by its time-out", gate.gate_id, gate.run_id)
        return True
    reason = gate.on_timeout.get("reason") or "nobody answered in time"
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=gate.run_id)
        locked = Gate.objects.select_for_update().get(pk=gate.pk)
        if locked.status != GateStatus.OPEN or not run.is_waiting:
            return False
        token = leases.acquire(run.pk, answers.TIME_OUT, takeover=True)
        gate_rows.expire(
            Writer(run.pk, token, answers.TIME_OUT),
            locked,
            f"gate {locked.stage}/{locked.gate_id} timed out: {reason}",
        )
        leases.release(run.pk, token)
    log.warning("gate %s of run-%s timed out; the run failed", gate.gate_id, gate.run_id)
    return True


def escalate(gate_pk: int) -> bool:
    claimed = Gate.objects.filter(
        pk=gate_pk, status=GateStatus.OPEN, escalated=False, escalate_at__lte=Now()
    ).update(escalated=True)
    if claimed != 1:
        return False
    gate = Gate.objects.get(pk=gate_pk)
    transaction.on_commit(
        lambda: signals.gate_escalating.send(sender=Gate, gate_pk=gate.pk, run_pk=gate.run_id),
        robust=True,
    )
    return True


def sweep() -> list[int]:
    """One pass; returns the pks of the gates it timed out or escalated."""
    acted = []
    due = Gate.objects.filter(status=GateStatus.OPEN, deadline__lte=Now()).values_list(
        "pk", flat=True
    )[:200]
    acted += [pk for pk in due if expire(pk)]
    near = Gate.objects.filter(
        status=GateStatus.OPEN, escalated=False, escalate_at__lte=Now()
    ).values_list("pk", flat=True)[:200]
    acted += [pk for pk in near if escalate(pk)]
    return acted

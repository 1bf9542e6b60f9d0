"""The sweeper's step for gates (every worker's sweeper thread runs it each interval):

* a gate whose deadline passed applies its on_timeout, whatever its votes (a time-out is not
  a vote): the default answer, recorded as the gate's answer by the time-out (HUMAN_ANSWERED,
  final, the stage queued again), or a failed run with the reason; a warning says how late;
* a gate whose escalation time came (80 % of its timeout) is announced to its escalation
  role once (signals.gate_escalating; notify listens).

Both are compare-and-sets on the database's clock: of several sweepers, one acts and the
others find the gate moved. A person's answer after the deadline is refused by answers.record
on the same clock, and left for the next round here: a refused request changes nothing.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models.functions import Now

from runs import signals
from runs.gates import answers
from runs.gates import rows as gate_rows
from runs.ledger import leases
from runs.ledger.append import Writer
from runs.models import Gate, GateStatus, Run

log = logging.getLogger("runs.gates")


def expire(gate_pk: int) -> bool:
    """Apply the gate's on_timeout if its deadline has passed and it is still open, whatever
    the votes so far (a time-out is not a vote: with a quorum of two and one vote, or votes
    that differ, the default answer is the gate's answer all the same)."""
    gate = Gate.objects.filter(pk=gate_pk, status=GateStatus.OPEN, deadline__lte=Now()).first()
    if gate is None:
        return False
    if gate.answered_on_timeout:
        try:
            done = answers.record(
                gate.pk, gate.on_timeout["answer"], {}, actor=answers.TIME_OUT, timed_out=True
            )
        except answers.AnswerRefused:
            return False  # answered meanwhile
        _warn(done.gate, "the time-out recorded the default answer and the stage goes on")
        return True
    reason = gate.on_timeout.get("reason") or "nobody answered in time"
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=gate.run_id)
        locked = Gate.objects.on_db_clock().select_for_update().get(pk=gate.pk)
        if locked.status != GateStatus.OPEN or not run.is_waiting or not locked.overdue:
            return False
        with leases.taken_over(run.pk, answers.TIME_OUT) as token:
            gate_rows.expire(
                Writer(run.pk, token, answers.TIME_OUT),
                locked,
                f"gate {locked.stage}/{locked.gate_id} timed out: {reason}",
            )
    _warn(locked, "the time-out failed the run")
    return True


def _warn(gate: Gate, what: str) -> None:
    """The one line an overdue gate gets: written by the one compare-and-set that closes it,
    so once, however many sweepers found it."""
    late = gate.late_by.total_seconds() if gate.late_by is not None else 0.0
    log.warning(
        "gate %s/%s of run-%s was open %.1f s past its deadline, with %d of %d votes: %s",
        gate.stage,
        gate.gate_id,
        gate.run_id,
        late,
        len(gate.votes),
        gate.quorum,
        what,
    )


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

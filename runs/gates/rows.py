"""The gate rows' writes, each riding with its event in one transaction: GATE_OPENED opens
(or re-opens) a gate and moves the run to *waiting*; HUMAN_ANSWERED records one person's
answer, and the last one a gate needs queues its stage again; GATE_REOPENED asks a
confirmation again after its target refused the call (runs/gates/reopen.py); a run closed
out closes its open gates with it. The events are the record; the rows are what the engine,
the planner and the pages look gates up by."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from runs.events import Failed, GateOpened, GateReopened, HumanAnswered, gate_names, read
from runs.ledger.append import RunMove, Writer, append
from runs.models import Effect, Event, Gate, GateStatus, Run


def find(run: Run, stage: str, gate_id: str, subject: str) -> Gate | None:
    """The run's gate for this subject; else, on a branch, an ancestor's answer to the same
    subject (the branch did not change what was asked, so the answer still holds)."""
    own = Gate.objects.filter(run=run, stage=stage, gate_id=gate_id, subject=subject).first()
    if own is not None or run.parent_id is None:
        return own
    ancestors = [r.pk for r in run.lineage()[1:]]
    return (
        Gate.objects.filter(
            run_id__in=ancestors,
            stage=stage,
            gate_id=gate_id,
            subject=subject,
            status=GateStatus.ANSWERED,
        )
        .order_by("-id")
        .first()
    )


def answered_otherwise(run: Run, stage: str, gate_id: str, subject: str) -> Gate | None:
    """The run's own answered gate of this id that showed another subject: the same
    question, asked again showing something else (execution/reentry.py says why)."""
    return (
        Gate.objects.filter(run=run, stage=stage, gate_id=gate_id, status=GateStatus.ANSWERED)
        .exclude(subject=subject)
        .order_by("-id")
        .first()
    )


def _from_now(seconds: float | None):
    if seconds is None:
        return None
    # The database's clock, like leases: every process agrees on when a deadline passes.
    return ExpressionWrapper(Now() + Value(timedelta(seconds=seconds)), DateTimeField())


def open_gate(writer: Writer, run: Run, stage: str, fields: dict[str, Any], *, usage: dict) -> Gate:
    """GATE_OPENED and the gate row in one transaction; the run waits, holding no ticket.
    `fields` are the row's (gate_id, kind, subject, question, form, initial, call, role,
    quorum, on_timeout, escalate_to, shape) and `timeout` in seconds or None. `usage` is what
    the stage used before it stopped: resumed work is held against its plan with it."""
    fields = dict(fields)
    timeout = fields.pop("timeout", None)
    opened = GateOpened(
        stage=stage,
        gate=fields["gate_id"],
        **{k: v for k, v in fields.items() if k not in ("gate_id", "shape")},
        timeout_seconds=timeout,
        usage=usage,
    )
    with transaction.atomic():
        event = append(writer, opened, move=RunMove(Run.Status.WAITING, ticket="", queued_at=None))
        values = {
            **fields,
            "seq": event.seq,
            "status": GateStatus.OPEN,
            "deadline": _from_now(timeout),
            "escalate_at": _from_now(timeout * 0.8 if timeout else None),
            "escalated": False,
            "answer": None,
            "diff": {},
            "answered_by": "",
            "answered_at": None,
            "answer_seq": None,
            "votes": [],
        }
        gate, _ = Gate.objects.update_or_create(
            run=run,
            stage=stage,
            gate_id=fields["gate_id"],
            subject=fields["subject"],
            defaults=values,
        )
    return gate


def record_answer(
    writer: Writer,
    gate: Gate,
    answer: dict[str, Any],
    diff: dict[str, Any],
    *,
    final: bool,
    ticket: str = "",
    user: int | None = None,
    timed_out: bool = False,
) -> Event:
    """HUMAN_ANSWERED for one person's answer, inside the caller's transaction (which holds
    the run's and the gate's locks). A final answer settles the gate and queues its stage
    under `ticket`; a vote towards a quorum leaves the run waiting. `user` is the pk of the
    signed-in person who voted. The time-out's default answer (`timed_out`) is final and is
    not a vote: the votes stay the people's."""
    votes = gate.votes if timed_out else [*gate.votes, _vote(writer.actor, user, answer)]
    move = (
        RunMove(Run.Status.RUNNING, current_stage=gate.stage, ticket=ticket, queued_at=Now())
        if final
        else None
    )
    answered = HumanAnswered(
        **gate_names(gate),
        by=writer.actor,
        answer=answer,
        diff=diff,
        final=final,
        votes=len(votes),
        quorum=gate.quorum,
        user=user,
        timed_out=timed_out,
    )
    event = append(writer, answered, move=move)
    gate.votes = votes
    if final:
        gate.status = GateStatus.ANSWERED
        gate.answer = answer
        gate.diff = diff
        gate.answered_by = writer.actor
        gate.answered_at = event.created_at
        gate.answer_seq = event.seq
    gate.save()
    return event


def _vote(actor: str, user: int | None, answer: dict[str, Any]) -> dict[str, Any]:
    return {"by": actor, **({"user": user} if user is not None else {}), "answer": answer}


def expire(writer: Writer, gate: Gate, reason: str) -> Event:
    """The gate's deadline passed and its on_timeout fails the run: FAILED with the reason,
    inside the caller's transaction."""
    expired = Failed(stage=gate.stage, error=reason, gate=gate.gate_id, timed_out=True)
    event = append(writer, expired, move=RunMove(Run.Status.FAILED))
    gate.status = GateStatus.EXPIRED
    gate.answer_seq = event.seq
    gate.save(update_fields=["status", "answer_seq"])
    return event


def reopen(writer: Writer, gate: Gate, refused: Effect | None) -> Event:
    """GATE_REOPENED, inside the caller's transaction (which holds the run's and the gate's
    locks): the answered gate is open again, with no answer, under the same time-out it had,
    and the run waits at it. `refused`, the effect that recorded the target's refusal of the
    call a confirmation's answer made; None for an answer the stage failed on (a question
    that sent it back, a rejected confirmation: sent_back.py). The earlier attempt is kept on
    the row and in the event."""
    opened = Event.objects.filter(run_id=gate.run_id, seq=gate.seq).only("type", "payload").first()
    # The time-out the gate was opened with (GATE_OPENED, or an earlier GATE_REOPENED).
    asked = read(opened) if opened is not None else None
    timeout = asked.timeout_seconds if isinstance(asked, GateOpened | GateReopened) else None
    attempt = {
        "attempt": len(gate.attempts) + 1,
        "answer": gate.answer,
        "by": gate.answered_by,
        "at": gate.answered_at.isoformat() if gate.answered_at else "",
        "answer_seq": gate.answer_seq,
    }
    if refused is None:
        attempt["sent_back"] = True
    else:
        attempt |= {
            "key": refused.delivery_key,
            "effect": refused.pk,
            "target": refused.target,
            "error": refused.error[:2000],
        }
    reopened = GateReopened(
        **gate_names(gate),
        refused=attempt,
        by=writer.actor,
        timeout_seconds=timeout,
    )
    event = append(
        writer,
        reopened,
        move=RunMove(Run.Status.WAITING, current_stage=gate.stage, ticket="", queued_at=None),
    )
    gate.attempts = [*gate.attempts, {**attempt, "asked_by": writer.actor, "seq": event.seq}]
    gate.seq = event.seq
    gate.status = GateStatus.OPEN
    gate.answer, gate.diff, gate.votes = None, {}, []
    gate.answered_by, gate.answered_at, gate.answer_seq = "", None, None
    gate.deadline = _from_now(timeout)
    gate.escalate_at = _from_now(timeout * 0.8 if timeout else None)
    gate.escalated = False
    gate.save()
    gate.refresh_from_db()
    return event


def close_open(run: Run, event: Event) -> int:
    """The run's open gates closed with it by `event` (its CLOSED_OUT), inside the caller's
    transaction: nobody may answer them any more. How many."""
    return Gate.objects.filter(run=run, status=GateStatus.OPEN).update(
        status=GateStatus.CLOSED, answer_seq=event.seq
    )

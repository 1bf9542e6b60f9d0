"""A run whose stage a person sent back, a question answered "request changes", and the
stage, given that answer, failed on it. A strict resume would run the stage again with the
recorded answer (an answer is never asked twice: the gate decision reuses it), so it would
fail the same way, while its plan promised what the stage does when it goes on (publishing,
charging: what a question's answer does is the stage's, which the planner cannot read). Such
a run's plan says so and offers no resume (runs/planning/planner.py); the ways on are to ask
the question again (reopen.py: its person answers anew, the article edited in the form, say)
or to close the run out and start a new one. A rejected confirmation the stage failed on
(`turned_down`) is the planner's to predict, and is (its call's line says it is not made and
costs nothing, runs/planning/gate_lines.py): its plan keeps the resume, and Ask again reopens
it too.

The rule reads the facts: the run failed; its newest answer sent the work back; the failure
is that answer's stage's, after it; and the stage made no new call in between (it replayed
what it had and stopped on the answer).
"""

from __future__ import annotations

from dataclasses import dataclass

from runs.gates.decision import describe_answer
from runs.gates.forms import REJECT, REQUEST_CHANGES
from runs.models import Event, Gate, GateKind, GateStatus, Run

__all__ = ["SentBack", "failed_on", "sent_back", "turned_down"]

# The answers a stage fails on, by kind of gate: a question's that sends the work back, a
# confirmation's that rejects the call.
FAILING = {GateKind.QUESTION: REQUEST_CHANGES, GateKind.CONFIRM: REJECT}


@dataclass(frozen=True)
class SentBack:
    """The answered gate the failed stage failed on: a question that sent the work back, or
    a confirmation whose call was rejected."""

    gate: Gate

    @property
    def rejected(self) -> bool:
        return self.gate.kind == GateKind.CONFIRM

    @property
    def said(self) -> str:
        """What the answer did, as the pages say it after who gave it."""
        return "rejected the call" if self.rejected else "sent the work back"

    @property
    def notes(self) -> str:
        """What the person said with the answer (its notes, or a reason)."""
        answer = self.gate.answer or {}
        return str(answer.get("reason") or answer.get("notes") or "").strip()

    @property
    def reason(self) -> str:
        gate, why = self.gate, self.notes
        return (
            f"{gate.stage}/{gate.gate_id} was {describe_answer(gate)}"
            + (f" ({why[:200]})" if why else "")
            + f", and {gate.stage} failed on that answer: a strict resume would reuse it and "
            f"fail the same way. Ask the {gate.get_role_display().lower()} again (Ask again), "
            "or close the run out and start a new one for the changes"
        )


def sent_back(run: Run) -> SentBack | None:
    """The question whose answer sent the failed run's stage back, if that is why it failed.
    The planner offers no resume for it (a resume would fail the same way)."""
    back = failed_on(run)
    return back if back is not None and not back.rejected else None


def turned_down(run: Run) -> SentBack | None:
    """The confirmation whose rejection the failed run's stage failed on (CallRejected, no
    call made after it). Its plan still offers the resume that hands the stage the same
    rejection (new code may catch it: docs/pipelines.md); Ask again is the other way on."""
    back = failed_on(run)
    return back if back is not None and back.rejected else None


def failed_on(run: Run) -> SentBack | None:
    """The answered gate the failed run's stage failed on, of either kind (FAILING): one
    read of the run's newest answer for a failed run, the log's only when that answer is one
    a stage fails on."""
    if run.status != Run.Status.FAILED:
        return None
    gate = Gate.objects.filter(run=run, status=GateStatus.ANSWERED).order_by("-answer_seq").first()
    if gate is None or (gate.answer or {}).get("decision") != FAILING.get(gate.kind):
        return None
    failed = (
        Event.objects.filter(run=run, type=Event.Type.FAILED, seq__gt=gate.answer_seq)
        .order_by("-seq")
        .only("seq", "stage")
        .first()
    )
    if failed is None or failed.stage != gate.stage:
        return None
    # What the stage did after the answer: a new call means it acted on it, and failed on
    # its own account (the attempt that read the answer started after it).
    called = Event.objects.filter(
        run=run, type=Event.Type.TOOL_CALLED, seq__gt=gate.answer_seq, seq__lt=failed.seq
    ).exists()
    return None if called else SentBack(gate)

"""A run whose stage a person sent back, a question answered "request changes", and the
stage, given that answer, failed on it. A strict resume would run the stage again with the
recorded answer (an answer is never asked twice: the gate decision reuses it), so it would
fail the same way, while its plan promised what the stage does when it goes on (publishing,
charging: what a question's answer does is the stage's, which the planner cannot read). Such
a run's plan says so and offers no resume (runs/planning/planner.py); the ways on are to ask
the question again (reopen.py: its person answers anew, the article edited in the form, say)
or to close the run out and start a new one. (A rejected confirmation is the planner's to
predict, and is: its call's line says it is not made and costs nothing,
runs/planning/gate_lines.py.)

The rule reads the facts: the run failed; its newest answer sent the work back; the failure
is that answer's stage's, after it; and the stage made no new call in between (it replayed
what it had and stopped on the answer).
"""

from __future__ import annotations

from dataclasses import dataclass

from runs.gates.decision import describe_answer
from runs.gates.forms import REQUEST_CHANGES
from runs.models import Event, Gate, GateStatus, Run

__all__ = ["SentBack", "sent_back"]


@dataclass(frozen=True)
class SentBack:
    gate: Gate

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
    """The gate whose answer sent the failed run's stage back, if that is why it failed: one
    read of the run's newest answer for a failed run, the log's only when it sent work back."""
    if run.status != Run.Status.FAILED:
        return None
    gate = Gate.objects.filter(run=run, status=GateStatus.ANSWERED).order_by("-answer_seq").first()
    if gate is None or (gate.answer or {}).get("decision") != REQUEST_CHANGES:
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

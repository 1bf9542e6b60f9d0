"""The one decision about a gate, which the engine acts on and the planner predicts with:

    nothing recorded for this subject ....... ASK: the run stops and waits for a human
    open (asked, not answered yet) .......... ASK: the same gate, still waiting
    timed out and failed the run ............ ASK: a human resumed it, so it is asked again
    answered ................................ USE_ANSWER: the recorded answer; never asked again
        its call refused by the target ...... USE_ANSWER, said with the refusal: only Ask
                                              again reopens it (runs/gates/reopen.py)
    asked again after a refusal (open) ...... ASK: waiting for the new answer
    closed with its run ..................... ASK: nobody answers it; the run is over

A gate is identified by its stage, its id and its *subject*: what it asks about (the question,
its form and the values shown; for a confirmation, the call's request). An answer holds for
its subject only, so a stage that runs again with the same subject reuses it, and an upgrade
branch whose new inputs change the subject asks again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.utils import timezone

from runs.ledger.chain import digest
from runs.models import Gate, GateKind, GateStatus


class GateAction(StrEnum):
    ASK = "ask"
    USE_ANSWER = "use-answer"


@dataclass(frozen=True)
class GateDecision:
    action: GateAction
    # For people: "answer recorded (approved by ana at 2026-12-03 09:14 UTC): not asked again".
    said: str


def question_subject(
    question: str, form: list[dict[str, Any]], initial: dict[str, Any], details: str = ""
) -> str:
    # Details join the subject only when given, so a gate asked without them keeps the
    # subject it had before they existed (a run waiting across the upgrade is not asked again).
    extra = {"details": details} if details else {}
    return digest({"question": question, "form": form, "initial": initial, **extra})


def gate_digest(gate: Gate) -> str:
    """What the reviewer was shown, as a fingerprint an answer must carry (like a plan's):
    the gate, the opening it answers (its seq), the question, its details, the call, the form
    and its initial values. An answer naming another digest was given to something else."""
    return digest(
        {
            "gate": gate.pk,
            "seq": gate.seq,
            "question": gate.question,
            "details": gate.details,
            "call": gate.call,
            "form": gate.form,
            "initial": gate.initial,
        }
    )


def call_subject(request_hash: str) -> str:
    # The request hash already names the tool and its arguments.
    return request_hash


def shape(pipeline: str, stage: str, gate_id: str, kind: str, call: dict[str, Any]) -> str:
    """What identical gates share across runs (answered together in bulk): the gate itself,
    and for a confirmation the call's tool, policy, target and the names of its arguments,
    never their values (each run's own call is still shown and checked)."""
    call_shape = (
        {
            "tool": call.get("tool"),
            "policy": call.get("policy"),
            "target": call.get("target"),
            "args": sorted(call.get("args", {})),
            "editable": list(call.get("editable", [])),
        }
        if call
        else {}
    )
    return digest(
        {"pipeline": pipeline, "stage": stage, "gate": gate_id, "kind": kind, "call": call_shape}
    )


def describe_answer(gate: Gate) -> str:
    """ "approved by ana at 09:14 UTC" and the like, from the recorded answer."""
    answer = gate.answer or {}
    if gate.kind == GateKind.CONFIRM:
        verdict = {"approve": "approved", "reject": "rejected"}.get(answer.get("decision"), "")
        if verdict == "approved" and gate.diff:
            verdict = "approved with edits"
    else:
        verdict = f"answered {answer.get('decision')}" if "decision" in answer else "answered"
    at = (
        timezone.localtime(gate.answered_at).strftime("%Y-%m-%d %H:%M %Z")
        if gate.answered_at
        else ""
    )
    return f"{verdict} by {gate.answered_by}" + (f" at {at}" if at else "")


def decide(gate: Gate | None, refused: str | None = None) -> GateDecision:
    """`refused`: what the target said when it refused the call made with the gate's answer
    (reopen.refusals), which the planner passes; None when it did not."""
    if gate is None:
        return GateDecision(GateAction.ASK, "not asked yet: the run will wait for a human")
    if gate.status == GateStatus.ANSWERED:
        if refused is not None:
            return GateDecision(
                GateAction.USE_ANSWER,
                f"answer recorded ({describe_answer(gate)}), but the target refused the call "
                f"made with it{f' ({refused})' if refused else ''}: ask again, or close the "
                "run out",
            )
        return GateDecision(
            GateAction.USE_ANSWER,
            f"answer recorded ({describe_answer(gate)}): not asked again",
        )
    if gate.status == GateStatus.EXPIRED:
        return GateDecision(GateAction.ASK, "timed out before: asked again")
    if gate.status == GateStatus.CLOSED:
        return GateDecision(GateAction.ASK, "closed with its run: nobody answers it")
    if gate.attempts:
        return GateDecision(
            GateAction.ASK, f"asked again after {earlier_attempt(gate)}: waiting for an answer"
        )
    return GateDecision(GateAction.ASK, "waiting for an answer")


def earlier_attempt(gate: Gate) -> str:
    """How a gate asked again came to be, in the words every face says it: "the target
    refused attempt 2" (a confirmation), "attempt 1 sent the work back" (a question)."""
    n = len(gate.attempts)
    if gate.attempts and gate.attempts[-1].get("sent_back"):
        return (
            f"attempt {n} was rejected"
            if gate.kind == GateKind.CONFIRM
            else f"attempt {n} sent the work back"
        )
    return f"the target refused attempt {n}"

"""The plan of a run whose stage stopped on a divergence (runs/execution/reentry.py): the
stage, run again, asked for a call it had made with another request. A strict resume would
run it again and ask the same, so the call's line is blocked; the ways on are a new branch,
which runs the stage afresh with the facts of today (offered whether or not an input
drifted), or closing the run out.
"""

from __future__ import annotations

from dataclasses import replace

from runs.events import Diverged, NeedsApproval, read
from runs.models import Event, Run
from runs.planning.plan import EffectLine
from runs.planning.replay import Action, StopKind

__all__ = ["block", "of_question", "stopped"]

ASKED_OTHERWISE = "asked for again with another request than it recorded"


def stopped(run: Run) -> Diverged | None:
    """The divergence the run stopped on, if its newest stop was one (two reads, only for a
    run that needs approval)."""
    if run.status != Run.Status.NEEDS_APPROVAL:
        return None
    last = (
        Event.objects.filter(run=run, type=Event.Type.NEEDS_APPROVAL)
        .order_by("-seq")
        .only("seq", "type", "stage", "payload")
        .first()
    )
    if last is None:
        return None
    stop = read(last)
    if not isinstance(stop, NeedsApproval) or stop.kind != StopKind.DIVERGED:
        return None
    # The stop is written right after its DIVERGED, in the same transaction.
    event = (
        Event.objects.filter(run=run, seq=last.seq - 1, type=Event.Type.DIVERGED)
        .only("seq", "type", "stage", "idempotency_key", "payload")
        .first()
    )
    said = read(event) if event is not None else None
    return said if isinstance(said, Diverged) else None


def of_question(diverged: Diverged) -> bool:
    """Whether what diverged is a question asked again showing something else (a gate, no
    tool), which no effect line stands for: the plan says it as a blocker alone."""
    return not diverged.tool


def block(lines: list[EffectLine], diverged: Diverged) -> list[EffectLine]:
    """The plan's lines with the diverged call's blocked (added if the plan did not list it);
    a question's divergence leaves them as they are (of_question)."""
    if of_question(diverged):
        return lines
    blocked = {
        "action": str(Action.BLOCKED),
        "kind": str(StopKind.DIVERGED),
        "reason": diverged.reason,
        "answer": ASKED_OTHERWISE,
        "cost": "0",
        "queries": 0,
    }
    found = False
    out = []
    for line in lines:
        if (line.stage, line.call_id) == (diverged.stage, diverged.call):
            line, found = replace(line, **blocked), True
        out.append(line)
    if not found:
        out.append(
            EffectLine(
                diverged.stage,
                diverged.call,
                diverged.tool,
                diverged.policy,
                "none",
                diverged.recorded_key,
                "",
                **blocked,
            )  # fmt: skip
        )
    return out

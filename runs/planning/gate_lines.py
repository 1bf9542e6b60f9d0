"""The plan's gate lines: what a resume does about each gate of the stages it re-runs, by the
same decision the engine acts on (runs/gates/decision.py). A recorded answer is used and
never asked again; a gate not answered yet (declared by the stage with `asks`, or a tool's
confirmation) will make the run wait for a human. For an upgrade branch, whose new inputs may
change what a gate asks about, every gate is an upper bound: asked again, unless the question
comes out unchanged.

What an approved confirmation's call is made with, and a reviewer's edit as people read it,
are the gates' own (runs/gates/recorded.py): the plan, the run page and the effect page say it
alike.
"""

from __future__ import annotations

from runs.gates.acts import with_article
from runs.gates.decision import GateAction, decide
from runs.gates.recorded import recorded
from runs.models import Gate, GateKind, Run
from runs.pipeline import Pipeline, Tool
from runs.planning.plan import EffectLine, GateLine
from runs.planning.replay import Action


def _declared(pipeline: Pipeline, stage: str) -> list[tuple[str, str, str, bool]]:
    """(gate id, kind, role, whether a condition decides it is asked) of the gates a stage
    may ask: its `asks`, and the calls of tools that need a confirmation."""
    spec = pipeline.stage(stage)
    gates = [(name, GateKind.QUESTION, "", True) for name in spec.asks]
    for call in spec.calls:
        confirm = pipeline.tool(call.tool).confirmation
        if confirm is not None:
            gates.append((call.call_id, GateKind.CONFIRM, str(confirm.role), bool(confirm.when)))
    return gates


def strict_lines(
    run: Run,
    pipeline: Pipeline,
    stages: list[str],
    refused: dict[tuple[str, str], str] | None = None,
) -> list[GateLine]:
    """`refused`: (stage, gate id) -> what the target said of the call it refused after that
    confirmation was answered (runs/gates/reopen.py): its line says so."""
    asked = recorded(run, stages)
    refused = refused or {}
    lines = []
    for stage in stages:
        declared = _declared(pipeline, stage)
        names = [name for name, _, _, _ in declared]
        names += [g for (s, g) in asked if s == stage and g not in names]
        for name in names:
            gate = asked.get((stage, name))
            if gate is not None:
                decision = decide(gate, refused.get((stage, name)))
                lines.append(
                    GateLine(stage, name, gate.kind, decision.action, decision.said, gate.role)
                )
                continue
            kind, role, conditional = next((k, r, c) for n, k, r, c in declared if n == name)
            said = (
                f"asks {with_article(role or 'operator')} to confirm the call before it is made"
                + (", if its condition holds" if conditional else "")
                if kind == GateKind.CONFIRM
                else "not asked yet: if the stage asks it, the run waits for a human"
            )
            lines.append(GateLine(stage, name, "", GateAction.ASK, said, role))
    return lines


def upgrade_lines(run: Run, pipeline: Pipeline, stages: list[str]) -> list[GateLine]:
    """The branch's gates: each asked again unless what it asks about comes out unchanged
    (then the answer given on this run is used); priced as asked."""
    lines = []
    for line in strict_lines(run, pipeline, stages):
        said = (
            "asked again on the branch if what it asks about changed with the new inputs "
            f"(here: {line.said})"
        )
        lines.append(GateLine(line.stage, line.gate_id, line.kind, GateAction.ASK, said, line.role))
    return lines


def rejected_line(stage: str, tool: Tool, gate: Gate) -> EffectLine:
    """The line of a call whose confirmation a human rejected (recorded.verdicts) and
    that was never made. A resume never asks an answered gate again (runs/execution/asking.py
    hands the stage the recorded answer), so the stage gets the same rejection: the line
    promises no call and no cost, where "call" would promise what the resume will not do."""
    reason = gate.answer.get("reason") or ""
    return EffectLine(
        stage, gate.gate_id, tool.name, str(tool.policy), "none", "", "",
        f"by {gate.answered_by}{f' ({reason})' if reason else ''} at its confirmation: the "
        "stage is handed the same rejection, nothing is called",
        str(Action.REJECTED), "0", verb=tool.verb, target=str(gate.call.get("target", "")),
    )  # fmt: skip

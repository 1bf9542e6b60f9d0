"""The plan's gate lines: what a resume does about each gate of the stages it re-runs, by the
same decision the engine acts on (runs/gates/decision.py). A recorded answer is used and
never asked again; a gate not answered yet (declared by the stage with `asks`, or a tool's
confirmation) will make the run wait for a human. For an upgrade branch, whose new inputs may
change what a gate asks about, every gate is an upper bound: asked again, unless the question
comes out unchanged.

A confirmation answered before the run stopped also says what its call will be made with: the
approved arguments (a reviewer's edits), which the plan prices and shows beside those asked.
"""

from __future__ import annotations

from typing import Any

from runs.gates.decision import GateAction, decide
from runs.ledger.canonical import canonical_json
from runs.models import Effect, Gate, GateKind, Run
from runs.pipeline import Pipeline
from runs.planning.plan import GateLine


def _recorded(run: Run, stages: list[str] | None) -> dict[tuple[str, str], Gate]:
    """The newest gate per (stage, gate) this run asked in these stages (None: in any)."""
    found: dict[tuple[str, str], Gate] = {}
    gates = Gate.objects.filter(run=run)
    for gate in (gates if stages is None else gates.filter(stage__in=stages)).order_by("id"):
        found[(gate.stage, gate.gate_id)] = gate
    return found


def _declared(pipeline: Pipeline, stage: str) -> list[tuple[str, str, str]]:
    """(gate id, kind, role) of the gates a stage may ask: its `asks`, and the calls of tools
    that need a confirmation."""
    spec = pipeline.stage(stage)
    gates = [(name, GateKind.QUESTION, "") for name in spec.asks]
    for call in spec.calls:
        confirm = pipeline.tool(call.tool).confirmation
        if confirm is not None:
            gates.append((call.call_id, GateKind.CONFIRM, str(confirm.role)))
    return gates


def strict_lines(
    run: Run,
    pipeline: Pipeline,
    stages: list[str],
    refused: dict[tuple[str, str], str] | None = None,
) -> list[GateLine]:
    """`refused`: (stage, gate id) -> what the target said of the call it refused after that
    confirmation was answered (runs/gates/reopen.py): its line says so."""
    recorded = _recorded(run, stages)
    refused = refused or {}
    lines = []
    for stage in stages:
        declared = _declared(pipeline, stage)
        names = [name for name, _, _ in declared]
        names += [g for (s, g) in recorded if s == stage and g not in names]
        for name in names:
            gate = recorded.get((stage, name))
            if gate is not None:
                decision = decide(gate, refused.get((stage, name)))
                lines.append(
                    GateLine(stage, name, gate.kind, decision.action, decision.said, gate.role)
                )
                continue
            kind, role = next((k, r) for n, k, r in declared if n == name)
            said = (
                f"asks a {role or 'operator'} to confirm the call before it is made, if its "
                "condition holds"
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


def approved_calls(run: Run, stages: list[str] | None = None) -> dict[tuple[str, str], Gate]:
    """The approved confirmations of these stages (None: of the whole run), by (stage, call):
    their answers hold the arguments the calls are made with."""
    return {
        where: gate
        for where, gate in _recorded(run, stages).items()
        if gate.kind == GateKind.CONFIRM and gate.approved
    }


def call_args(gate: Gate | None, effect: Effect | None) -> dict[str, Any] | None:
    """The arguments a call is made with, as the plan prices it: what its effect was asked
    (sent, or about to be), else what its confirmation approved; None when neither is known
    (the tool's own price then)."""
    if effect is not None:
        return effect.request
    return gate.answer.get("args") if gate is not None else None


def edited(gate: Gate | None, effect: Effect | None) -> str:
    """For people, a call made with a reviewer's edits: "amount 5.00 → 20.00, by sam (asked
    at $5.00)"; "" otherwise, or when the effect was made with other arguments."""
    if gate is None or not gate.diff:
        return ""
    if effect is not None and effect.request != gate.answer.get("args"):
        return ""
    changes = ", ".join(
        f"{name} {_said(before)} → {_said(after)}" for name, (before, after) in gate.diff.items()
    )
    return f"{changes}, by {gate.answered_by} (asked at ${gate.call.get('cost', '0')})"


def _said(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)

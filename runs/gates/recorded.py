"""What a run's gates recorded, as the plan and the pages read it: the newest gate per (stage,
gate), the approved confirmations, the arguments a confirmed call is made with (a reviewer's
edits included), which the plan prices and shows beside those asked, and a reviewer's edit in
the words the plan, the run page and the effect page say it."""

from __future__ import annotations

from typing import Any

from runs.ledger.canonical import canonical_json
from runs.models import Effect, Gate, Run
from runs.quantities import money


def recorded(run: Run, stages: list[str] | None) -> dict[tuple[str, str], Gate]:
    """The newest gate per (stage, gate) this run asked in these stages (None: in any)."""
    found: dict[tuple[str, str], Gate] = {}
    gates = Gate.objects.filter(run=run)
    for gate in (gates if stages is None else gates.filter(stage__in=stages)).order_by("id"):
        found[(gate.stage, gate.gate_id)] = gate
    return found


Verdicts = tuple[dict[tuple[str, str], Gate], dict[tuple[str, str], Gate]]


def verdicts(run: Run, stages: list[str] | None = None) -> Verdicts:
    """The answered confirmations of these stages (None: of the whole run), by (stage, call),
    in one reading: the approved, whose answers hold the arguments the calls are made with,
    and the rejected, which a resume hands its stage again (an answered gate is never asked
    again)."""
    approved, rejected = {}, {}
    for where, gate in recorded(run, stages).items():
        if gate.approved:  # None for a question, or a confirmation not answered
            approved[where] = gate
        elif gate.approved is False:
            rejected[where] = gate
    return approved, rejected


def approved_calls(run: Run, stages: list[str] | None = None) -> dict[tuple[str, str], Gate]:
    return verdicts(run, stages)[0]


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
    return f"{changes}, by {gate.answered_by} (asked at {money(gate.call.get('cost', '0'))})"


def _said(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)

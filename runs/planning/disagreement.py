"""Effect rows the plan would act on that their events do not explain: a row written behind
the append path ("confirmed as ch-forged" would skip the reconcile-first lookup). Its line
blocks the plan until a supervisor has looked."""

from __future__ import annotations

from runs.ledger import derived
from runs.models import Effect
from runs.planning.plan import EffectLine
from runs.planning.replay import Action, StopKind


def disagreeing(
    effects: dict[tuple[str, str], Effect], said: dict[str, derived.Derived]
) -> dict[tuple[str, str], str]:
    """(stage, call) -> why, for the rows whose events (`said`) do not explain them."""
    found = {}
    for where, effect in effects.items():
        reason = derived.effect_disagreement(effect, said.get(effect.delivery_key))
        if reason:
            found[where] = f"{reason}; a supervisor must look before anything is planned on it"
    return found


def blocked_line(stage: str, call_id: str, effect: Effect, reason: str) -> EffectLine:
    return EffectLine(
        stage, call_id, effect.tool, effect.policy, effect.status, effect.delivery_key, "",
        "the ledger row disagrees with its events", str(Action.BLOCKED), "0",
        kind=str(StopKind.LEDGER_DISAGREES), reason=reason,
    )  # fmt: skip

"""What a plan says about calls billed by what they consume (model tools, runs/tools/model.py):
their tokens and money, and the caveat of a retry.

A completion's tokens are not known before the model answers. The plan estimates each model
call it will make from the same call's last confirmed answer in the pipeline (its recorded
usage, priced by the tool's own table), and says so; with a deterministic model (the demo's)
the estimate is exact, and the contract holds calls to the plan, not tokens (contract.py). A
retry under the same key of an unknown outcome says what it may cost: model APIs do not
deduplicate, so the first request may have been billed too.

Reads the effect ledger's recorded results; never a conversation.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from runs.models import Effect
from runs.pipeline import Pipeline, Tool
from runs.planning.plan import Cost, EffectLine
from runs.planning.replay import CALLING, Action, Decision, StopKind
from runs.quantities import at, tokens

# A NEVER call's stop on an outcome the ledger does not know.
UNKNOWN_OUTCOME = frozenset({StopKind.INTENT, StopKind.UNKNOWN})


def may_bill_twice(tool: Tool, decision: Decision) -> bool:
    """Whether the resume retries under the key a call its target may have billed already
    (the tool's caveat: model APIs do not deduplicate)."""
    return bool(tool.caveat) and decision.action == Action.RETRY_SAME_KEY


def answer(tool: Tool, decision: Decision) -> str:
    """The line's answer, with the tool's caveat where the resume retries under the key, or
    where it stops on an outcome nobody knows (a NEVER tool's: an agent adapter's tool whose
    policy was not declared says so there, runs/integrations/)."""
    if may_bill_twice(tool, decision) or (tool.caveat and decision.kind in UNKNOWN_OUTCOME):
        return f"{decision.answer}; {tool.caveat}" if decision.answer else tool.caveat
    return decision.answer


def last_answer(pipeline: Pipeline, tool: Tool, stage: str, call_id: str) -> dict[str, Any] | None:
    """The newest confirmed result of this call in the pipeline, to estimate from."""
    return (
        Effect.objects.filter(
            run__pipeline=pipeline.name,
            stage=stage,
            call_id=call_id,
            tool=tool.name,
            status=Effect.Status.CONFIRMED,
        )
        .exclude(result=None)
        .order_by("-id")
        .values_list("result", flat=True)
        .first()
    )


def price(pipeline: Pipeline, lines: list[EffectLine], cost: Cost) -> Decimal:
    """Add the estimated tokens of the metered calls the lines make to `cost`; return the
    money they are estimated to cost (the caller adds it to the total)."""
    metered = twice = Decimal(0)
    for line in lines:
        if line.action not in CALLING:
            continue
        tool = pipeline.tool(line.tool)
        cost.billed_twice += line.may_bill_twice
        twice += Decimal(line.cost) if line.may_bill_twice else 0
        if tool.metered is None:
            continue
        result = last_answer(pipeline, tool, line.stage, line.call_id)
        if result is None:
            continue  # never answered yet: nothing to estimate from ($0, no tokens)
        money, tokens = tool.metered(result)
        metered += money
        twice += money if line.may_bill_twice else 0
        for kind, n in tokens.items():
            if n:
                cost.tokens[kind] = cost.tokens.get(kind, 0) + int(n)
    if metered or cost.tokens:
        cost.metered_money = str(at(metered))
    if twice:
        cost.billed_twice_money = str(at(twice))
    return metered


def saved(result: dict[str, Any] | None, tool: Tool) -> tuple[Decimal, dict[str, int]]:
    """What reusing a recorded answer saves: its money and tokens."""
    if result is None or tool.metered is None:
        return Decimal(0), {}
    return tool.metered(result)


def tokens_text(cost: Cost) -> str:
    """ ", 1,234 tokens" for a cost with model calls ("" without): what plans print."""
    total = cost.tokens.get("prompt", 0) + cost.tokens.get("completion", 0)
    return f", {tokens(total)} tokens" if total else ""

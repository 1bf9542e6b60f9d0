"""What a run's model calls consumed, for its page: each metered call's tokens and money, per
stage and for the run, read from the calls' TOOL_RESULT events (their `usage` and `model`,
written when the answer came; a call reused from the ledger records none, so a resume is
never counted twice). One query, whatever the run's length."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from runs.events import ToolResult, present, read
from runs.models import Event, Run


@dataclass
class Spent:
    """Tokens by kind (prompt, completion, cached) and the money they cost."""

    tokens: dict[str, int] = field(default_factory=dict)
    money: Decimal = Decimal(0)
    calls: int = 0

    def add(self, tokens: dict[str, int], money: Decimal) -> None:
        for kind, n in tokens.items():
            self.tokens[kind] = self.tokens.get(kind, 0) + int(n or 0)
        self.money += money
        self.calls += 1

    @property
    def total(self) -> int:
        """Prompt and completion tokens (cached ones are part of the prompt)."""
        return self.tokens.get("prompt", 0) + self.tokens.get("completion", 0)


@dataclass(frozen=True)
class SpendLine:
    stage: str
    call: str
    model: str
    spent: Spent


@dataclass
class RunSpend:
    lines: list[SpendLine] = field(default_factory=list)
    stages: dict[str, Spent] = field(default_factory=dict)
    run: Spent = field(default_factory=Spent)


def _money(cost: str) -> Decimal:
    try:
        return Decimal(cost or 0)
    except ArithmeticError:
        return Decimal(0)


def run_spend(run: Run) -> RunSpend:
    """The run's metered calls in the order they were answered, with the stage and run
    totals."""
    rows = (
        Event.objects.filter(present("usage", ToolResult), run=run, type=Event.Type.TOOL_RESULT)
        .order_by("seq")
        .only("type", "stage", "payload")
    )
    spend = RunSpend()
    for row in rows:
        said = read(row)
        money = _money(said.cost)
        line = SpendLine(row.stage, said.call, said.model or said.tool, Spent())
        line.spent.add(said.usage, money)
        spend.lines.append(line)
        spend.stages.setdefault(row.stage, Spent()).add(said.usage, money)
        spend.run.add(said.usage, money)
    return spend

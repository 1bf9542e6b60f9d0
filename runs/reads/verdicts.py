"""The verdict on the plan a run was resumed with (PLAN_KEPT or PLAN_DEVIATED), said for
people: what the resumed work used against what the approved plan promised."""

from __future__ import annotations

from dataclasses import dataclass

from runs.events import PlanKept, read
from runs.models import Event, Run
from runs.planning.contract import Usage
from runs.quantities import money

__all__ = ["PlanVerdict", "model_tokens", "verdict"]


def model_tokens(usage: Usage) -> str:
    """ " (1,234 model tokens)": what metered calls used (prompt and completion; the cached
    tokens are part of the prompt), or "" where no call was metered."""
    used = usage.tokens.get("prompt", 0) + usage.tokens.get("completion", 0)
    return f" ({used:,} model tokens)" if used else ""


@dataclass(frozen=True)
class PlanVerdict:
    """Whether the resumed work kept the plan it was approved with (PLAN_KEPT or
    PLAN_DEVIATED)."""

    kept: bool
    seq: int
    fingerprint: str
    mode: str
    promised: Usage
    used: Usage
    reason: str

    @property
    def summary(self) -> str:
        used, promised = self.used, self.promised
        calls = f"{used.tool_calls} call{'s' if used.tool_calls != 1 else ''}"
        spent = f"{money(used.money)}{model_tokens(used)}"
        if self.kept:
            # Calls the plan could not list (a stage that calls as it goes, each held to its
            # policy and gates) are said apart: "1 of 0 promised calls, $20.00 of $0.00"
            # read as a plan broken, not kept.
            n_beyond = sum(used.beyond.values())
            within, within_money = used.tool_calls - n_beyond, used.money - used.beyond_money
            beyond = (
                f"; and {n_beyond} call{'s' if n_beyond != 1 else ''} it could not list, "
                f"{money(used.beyond_money)}, made as the stage went, each held to its policy "
                "and gates"
                if n_beyond
                else ""
            )
            if within == promised.tool_calls and within_money == promised.money:
                listed = f"{within} call{'s' if within != 1 else ''}"
                return f"Plan kept: {listed}, {money(within_money)}{model_tokens(used)}, as approved{beyond}"
            if within_money > promised.money:
                # Kept though it cost more: only a model's tokens may (estimated before it
                # answers, contract.shortfall), and "$5.1374 of $5.1369" read as a budget broken.
                return (
                    f"Plan kept: {within} of {promised.tool_calls} promised "
                    f"call{'s' if promised.tool_calls != 1 else ''}, {money(within_money)} "
                    f"against {money(promised.money)} estimated: the models' answers cost "
                    f"{money(within_money - promised.money)} more than estimated"
                    f"{model_tokens(used)}{beyond}"
                )
            # An upper bound kept: less than promised (a reuse in place of a call).
            return (
                f"Plan kept: {within} of {promised.tool_calls} promised "
                f"call{'s' if promised.tool_calls != 1 else ''}, "
                f"{money(within_money)} of {money(promised.money)}{model_tokens(used)}{beyond}"
            )
        return (
            f"Plan deviated: {self.reason or 'the resumed work departed from the plan'} "
            f"(approved: {promised.tool_calls} calls, {money(promised.money)}; "
            f"so far: {calls}, {spent})"
        )


def verdict(run: Run) -> PlanVerdict | None:
    """The newest verdict event of the run: one indexed read from the end of its log."""
    if run.attempt == 0 and run.parent_id is None:
        return None  # never approved: no plan to keep
    row = (
        Event.objects.filter(run=run, type__in=(Event.Type.PLAN_KEPT, Event.Type.PLAN_DEVIATED))
        .order_by("-seq")
        .only("seq", "type", "payload")
        .first()
    )
    if row is None:
        return None
    said = read(row)
    kept = isinstance(said, PlanKept)
    return PlanVerdict(
        kept=kept,
        seq=row.seq,
        fingerprint=said.fingerprint,
        mode=said.mode,
        promised=Usage.from_dict(said.promised),
        used=Usage.from_dict(said.used),
        reason="" if kept else said.reason,
    )

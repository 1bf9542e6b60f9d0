"""One effect's page: what the ledger holds for a call, what the run's stored plan does about
it, and what its target said each time a supervisor asked (TARGET_ASKED). Reads only: the
target is asked on the page's POST (runs/planning/target_lookup.py), never here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runs.events import LedgerEdited, TargetAsked, read, where
from runs.gates import recorded
from runs.gates.acts import act_of
from runs.ledger.edits import contradiction
from runs.models import Effect, Event, Run, StoredPlan, SupervisorAsk
from runs.pipeline import UnknownPipeline, registry
from runs.planning.planner import EffectLine, Plan
from runs.planning.replay import UNSETTLED, Action


@dataclass(frozen=True)
class Asked:
    """One recorded answer of the effect's target: its event's seq, and what it said."""

    seq: int
    said: TargetAsked

    @property
    def recordable(self) -> bool:
        """One click records it: it says what the target holds, or that it holds nothing."""
        said = self.said
        return not said.error and (said.matches or not said.found)


@dataclass
class EffectPage:
    effect: Effect
    run: Run
    askable: bool
    # What the tool calls its target ("card processor"); the row's own target otherwise.
    target: str
    asked: Asked | None
    line: EffectLine | None
    # A call made with a reviewer's edits: what changed and the price asked; "" otherwise.
    edited: str = ""
    # What the call does outside, in its tool's verb and the price of its request ("charges
    # $5.00 to acct-42 (card)"): what is at stake while it is unsettled.
    at_stake: str = ""
    # The operators who asked a supervisor to settle it (runs/asks.py), newest first.
    asks: list[SupervisorAsk] = field(default_factory=list)
    # The supervisor's correction of the row, when it is newer than any answer of the target:
    # (its seq, what it says): who, why, what it changed.
    settled: tuple[int, LedgerEdited] | None = None

    @property
    def unsettled(self) -> bool:
        return self.effect.status in UNSETTLED

    @property
    def contradicted(self) -> bool:
        """The target's newest answer says otherwise than the settled row: confirmed as X
        where it holds nothing (or another id), failed where it holds it. A supervisor's
        word may be wrong; the page says so and offers the answer to record."""
        if self.unsettled or self.asked is None:
            return False
        effect = self.effect
        return bool(contradiction(self.asked.said, effect.status, effect.external_id))

    @property
    def can_ask(self) -> bool:
        # Settled, it is asked where its answer or its plan doubts the row (a supervisor's
        # "confirmed" the target was found not to hold blocks the plan).
        blocked = self.line is not None and self.line.action == Action.BLOCKED
        return (
            self.askable
            and self.run.is_resumable
            and (self.unsettled or self.contradicted or blocked)
        )

    @property
    def can_record(self) -> bool:
        return self.can_ask and self.asked is not None and self.asked.recordable


def get_effect(run_pk: int, pk: int) -> Effect | None:
    return Effect.objects.filter(pk=pk, run_id=run_pk).first()


def _tool(run: Run, name: str) -> Any:
    try:
        return registry.get(run.pipeline).tool(name)
    except (UnknownPipeline, KeyError):
        return None


def _newest(effect: Effect) -> tuple[Asked | None, tuple[int, LedgerEdited] | None]:
    """The target's newest answer, or the supervisor's correction of the row when that came
    after it (the answer is then what was asked before the correction, and asking again is
    the way to a fresh one): the page says who settled it, not that nobody asked."""
    row = (
        Event.objects.filter(
            where(TargetAsked, LedgerEdited, effect=effect.pk), run_id=effect.run_id
        )
        .order_by("-seq")
        .only("seq", "type", "payload")
        .first()
    )
    if row is None:
        return None, None
    if row.type == Event.Type.TARGET_ASKED:
        return Asked(seq=row.seq, said=read(row)), None
    return None, (row.seq, read(row))


def _plan_line(run: Run, effect: Effect) -> EffectLine | None:
    if not run.is_resumable:
        return None  # a closed or finished run's stored plan is of a resume there will not be
    stored = StoredPlan.objects.filter(run=run).first()
    if stored is None:
        return None
    plan = Plan.from_dict(stored.data)
    return next((e for e in plan.effects if e.delivery_key == effect.delivery_key), None)


def target_name(effect: Effect, run: Run) -> str:
    """What the effect's page calls its target: its HTTP tool's name for it ("card
    processor"), else the account@platform the effect names."""
    return _target_name(_tool(run, effect.tool)) or effect.target


def _target_name(tool: Any) -> str:
    """What an HTTP tool calls its target ("card processor"): its spec's, behind its call."""
    spec = getattr(getattr(tool, "call", None), "__self__", None)
    return str(getattr(spec, "target", "") or "")


def _at_stake(effect: Effect, tool: Any) -> str:
    """The call's act, priced by what it was asked with (a tool this process does not load:
    the price its row recorded)."""
    try:
        price = tool.price_of(effect.request) if tool is not None else effect.cost
    except (KeyError, TypeError, ValueError, ArithmeticError):  # a request the tool never made
        price = effect.cost
    act = act_of(
        {
            "tool": effect.tool,
            "verb": tool.verb if tool is not None else "call",
            "cost": str(price),
            "policy": effect.policy,
            "target": effect.target,
        }
    )
    return act.text if act is not None else ""


def effect_page(effect: Effect) -> EffectPage:
    run = Run.objects.select_related("parent").get(pk=effect.run_id)
    tool = _tool(run, effect.tool)
    where = (effect.stage, effect.call_id)
    asked, settled = _newest(effect)
    return EffectPage(
        effect=effect,
        run=run,
        askable=tool is not None and tool.reconcile is not None,
        target=_target_name(tool) or effect.target,
        asked=asked,
        settled=settled,
        line=_plan_line(run, effect),
        edited=recorded.edited(recorded.approved_calls(run).get(where), effect),
        at_stake=_at_stake(effect, tool),
        asks=list(effect.asks.order_by("-id")[:20]),
    )

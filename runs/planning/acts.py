"""What each way of moving a stopped run on does to the outside world, in the tools' own verbs
and money, and the drift that makes an upgrade an option: the one writer of these words for
every face (the run page's bar and its confirmations, the plan page, a group's page, the API's
plan, `manage.py plan`).

    strict resume   publishes an article, charges $5.00; keeps facts v3 (facts v3 → v4 is
                    the upgrade's)
    upgrade         facts v3 → v4: publishes a second article (the first, art-1, stays),
                    charges $5.00

A call is named when a person would weigh it before pressing the button: it cannot simply be
made again (RECONCILE_FIRST, NEVER), or it costs money and its tool names its act (a verb of
its own). Each is said by runs/gates/acts.py's act_of, as a gate's tick says its call; the
other calls (an upload, a model's turn) are in the option's count and price. Reads the plan
only."""

from __future__ import annotations

from dataclasses import dataclass, field

from runs import quantities
from runs.gates.acts import GUARDED, act_of, third_person
from runs.planning.plan import EffectLine, MadeAgain, Plan
from runs.planning.replay import CALLING

STRICT, UPGRADE = "strict", "upgrade"


@dataclass(frozen=True)
class OptionActs:
    """One option's acts and the drift it answers, with the sentences every face shows."""

    mode: str
    # "publishes an article", "charges $5.00": in the order the calls are made.
    acts: list[str] = field(default_factory=list)
    # "facts v3 → v4", per drifted input; empty without drift.
    drift: list[str] = field(default_factory=list)
    # The pinned versions a strict resume keeps: "facts v3".
    kept: list[str] = field(default_factory=list)

    @property
    def does(self) -> str:
        """What pressing the button does outside, and what the drift has to do with it:
        the bar's words and the command line's."""
        acts = ", ".join(self.acts)
        if self.mode == UPGRADE:
            changed = "; ".join(self.drift)
            return f"{changed}: {acts}" if changed and acts else changed or acts
        if not self.drift:
            return acts
        keeps = f"keeps {', '.join(self.kept)} ({'; '.join(self.drift)} is the upgrade's)"
        return f"{acts}; {keeps}" if acts else keeps

    @property
    def confirm(self) -> str:
        """The confirmation's words, after "I have read the plan: it" (strict) or "I accept
        that it" (upgrade): "takes facts v3 → v4 and publishes a second article (…)"."""
        acts = ", ".join(self.acts)
        if self.mode == UPGRADE:
            takes = f"takes {'; '.join(self.drift)}" if self.drift else ""
            return " and ".join(part for part in (takes, acts) if part)
        if not self.drift:
            return acts
        keeps = f"keeps {', '.join(self.kept)} ({'; '.join(self.drift)} is the upgrade's)"
        return f"{acts}; it {keeps}" if acts else keeps


@dataclass(frozen=True)
class PlanActs:
    strict: OptionActs
    upgrade: OptionActs

    def to_dict(self) -> dict[str, dict[str, object]]:
        return {
            o.mode: {
                "acts": o.acts,
                "drift": o.drift,
                "kept": o.kept,
                "does": o.does,
                "confirm": o.confirm,
            }
            for o in (self.strict, self.upgrade)
        }


def _weighed(line: EffectLine) -> bool:
    """A call a person weighs at the button: one that cannot simply be made again, or that
    costs money and names its act (a model call's tokens are in the option's price)."""
    if line.action not in CALLING:
        return False
    named = bool(line.verb) and line.verb != "call"
    return line.policy in GUARDED or named and bool(quantities.decimal(line.cost))


def line_act(line: EffectLine, where: bool = True) -> str:
    """One call of a plan as its act: "charges $5.00 to acct-42 (card)"; without `where`,
    "charges $5.00" (a group's runs act on targets of their own)."""
    call = {
        "tool": line.tool,
        "verb": line.verb or "call",
        "cost": line.cost,
        "policy": line.policy,
        "target": line.target if where else "",
    }
    act = act_of(call)
    return act.text if act is not None else ""


def made_again(warning: MadeAgain | str, line: EffectLine | None = None, where: bool = True) -> str:
    """An upgrade's warning as its act: "publishes a second article (the first, art-1,
    stays)", "charges $5.00 again (the first, ch-1, stays)" for a call with a price (its
    branch `line`). A plan stored before its warnings were records says its sentence as it
    is."""
    if not isinstance(warning, MadeAgain):
        return warning
    first = f"(the first, {warning.made_as}, stays)" if where else "(the first stays)"
    if line is not None and quantities.decimal(line.cost):
        return f"{line_act(line, where)} again {first}"
    noun = warning.tool.removeprefix(f"{warning.verb}_").replace("_", " ")
    return f"{third_person(warning.verb)} a second {noun} {first}"


def _upgrade_acts(plan: Plan, where: bool) -> list[str]:
    """The branch's acts in the order it makes them, each call it makes again said so."""
    if any(isinstance(w, str) for w in plan.upgrade.warnings):
        return [str(w) for w in plan.upgrade.warnings]  # stored as sentences: said as they are
    again = {(w.stage, w.call_id): w for w in plan.upgrade.warnings if isinstance(w, MadeAgain)}
    acts: list[str] = []
    lines = {(e.stage, e.call_id): e for e in plan.upgrade.effects}
    for call, line in lines.items():
        if call in again:
            acts.append(made_again(again.pop(call), line, where))
        elif _weighed(line):
            acts.append(line_act(line, where))
    return acts + [made_again(w, where=where) for w in again.values()]


def plan_acts(plan: Plan, *, where: bool = True) -> PlanActs:
    """Both options' acts, from the plan as computed or stored; without `where`, as a group
    of runs shares them (runs/planning/grouping.py): the same acts, each run's own targets."""
    drift = [f"{d.input} {d.pinned} → {d.current}" for d in plan.drift]
    return PlanActs(
        strict=OptionActs(
            STRICT,
            [line_act(e, where) for e in plan.effects if _weighed(e)],
            drift,
            kept=[f"{d.input} {d.pinned}" for d in plan.drift],
        ),
        upgrade=OptionActs(
            UPGRADE, _upgrade_acts(plan, where), drift if plan.upgrade.available else []
        ),
    )

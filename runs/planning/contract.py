"""The approved plan as a contract the engine keeps.

An approval writes the plan's promise into the chained event that starts the resumed work
(RESUMED for a strict resume, the branch's RUN_CREATED for an upgrade): per expected call, the
action replay.decide() predicted, and the usage the plan priced (calls and reconcile questions
per tool, money). While the resumed work runs, the engine decides each call with the same
function and asks `Contract.difference()` before acting on it; at the end it compares what it
used with what was promised. The first difference is a PLAN_DEVIATED event; a resume that did
exactly what was approved ends with PLAN_KEPT.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from runs.events import TOKEN_KINDS, read
from runs.models import ApprovalMode, Event, Run
from runs.planning.replay import CALLING, GUARDED_POLICIES, STOPPING, Action
from runs.quantities import at, money

# What the engine may do in place of a promised call, on a plan that is an upper bound.
DOING_LESS = frozenset({Action.REUSE, Action.RECORD_FOUND, Action.SKIP})


def _kind(action: str) -> str:
    """Actions compared by what they do to the outside world."""
    if action in CALLING:
        return "call"
    if action in STOPPING:
        return "stop"
    return "no call"


@dataclass
class Usage:
    """What resumed work used: calls and reconcile questions per tool, and money; for tools
    billed by what they consume (a model's tokens), the tokens (prompt, completion, cached)
    and the part of the money they cost."""

    calls: dict[str, int] = field(default_factory=dict)
    queries: dict[str, int] = field(default_factory=dict)
    money: Decimal = Decimal(0)
    tokens: dict[str, int] = field(default_factory=dict)
    metered_money: Decimal = Decimal(0)
    # Calls that continued the plan in a stage whose calls are made as they go (Contract.open),
    # per tool, and their price: part of `calls` and `money`, not of what the plan listed.
    beyond: dict[str, int] = field(default_factory=dict)
    beyond_money: Decimal = Decimal(0)

    def add_beyond(self, tool: str, cost: Decimal) -> None:
        self.beyond[tool] = self.beyond.get(tool, 0) + 1
        self.beyond_money += cost

    def add_call(self, tool: str, cost: Decimal) -> None:
        self.calls[tool] = self.calls.get(tool, 0) + 1
        self.money += cost

    def add_query(self, tool: str) -> None:
        self.queries[tool] = self.queries.get(tool, 0) + 1

    def add_metered(self, money: Decimal, tokens: dict[str, int]) -> None:
        """What a metered call consumed, once its answer says (its call is counted before)."""
        for kind, n in tokens.items():
            if n:
                self.tokens[kind] = self.tokens.get(kind, 0) + int(n)
        self.money += money
        self.metered_money += money

    def add(self, other: Usage) -> None:
        for tool, n in other.calls.items():
            self.calls[tool] = self.calls.get(tool, 0) + n
        for tool, n in other.queries.items():
            self.queries[tool] = self.queries.get(tool, 0) + n
        for kind, n in other.tokens.items():
            self.tokens[kind] = self.tokens.get(kind, 0) + n
        self.money += other.money
        self.metered_money += other.metered_money
        for tool, n in other.beyond.items():
            self.beyond[tool] = self.beyond.get(tool, 0) + n
        self.beyond_money += other.beyond_money

    @property
    def tool_calls(self) -> int:
        return sum(self.calls.values())

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "calls": dict(sorted(self.calls.items())),
            "queries": dict(sorted(self.queries.items())),
            "money": str(at(self.money)),
        }
        if self.tokens or self.metered_money:
            # Only where something was metered: usage without it reads as it always did.
            data["tokens"] = {k: self.tokens[k] for k in TOKEN_KINDS if k in self.tokens}
            data["metered_money"] = str(at(self.metered_money))
        if self.beyond:
            data["beyond"] = dict(sorted(self.beyond.items()))
            data["beyond_money"] = str(at(self.beyond_money))
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        data = data or {}
        return cls(
            dict(data.get("calls", {})),
            dict(data.get("queries", {})),
            Decimal(data.get("money", 0)),
            dict(data.get("tokens", {})),
            Decimal(data.get("metered_money", 0)),
            dict(data.get("beyond", {})),
            Decimal(data.get("beyond_money", 0)),
        )


@dataclass(frozen=True)
class Difference:
    stage: str
    call_id: str
    tool: str
    planned: str  # the plan's action, or "" for a call the plan did not list
    actual: str
    # The engine must not make this call: stop the run before it, for a human.
    stop_before: bool

    def describe(self) -> str:
        planned = f"the plan said {self.planned}" if self.planned else "the plan did not list it"
        return (
            f"{self.tool} ({self.stage}/{self.call_id}): {planned}, the engine found {self.actual}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "call": self.call_id,
            "tool": self.tool,
            "planned": self.planned,
            "actual": self.actual,
            "stopped_before_call": self.stop_before,
        }


@dataclass(frozen=True)
class Contract:
    fingerprint: str
    mode: str
    # "stage/call_id" -> the plan's action for it.
    lines: dict[str, str]
    promised: Usage
    # The seq of the event that carries it: the resumed work is everything after it.
    seq: int = 0
    # "stage/gate_id" -> "use-answer" (its answer is recorded: never asked again) or "ask".
    gates: dict[str, str] = field(default_factory=dict)
    # The stages whose calls are made as they go (an agent loop): a call the plan could not
    # list there continues it, held to its policy and gates, and counted apart (Usage.beyond).
    open: tuple[str, ...] = ()

    @classmethod
    def from_plan(
        cls,
        fingerprint: str,
        mode: str,
        effects: list[Any],
        cost: Any,
        gates: list[Any] = (),
        open_stages: list[str] = (),
    ) -> Contract:
        return cls(
            fingerprint=fingerprint,
            mode=mode,
            lines={f"{e.stage}/{e.call_id}": str(e.action) for e in effects},
            promised=Usage(
                dict(cost.calls),
                dict(cost.queries),
                Decimal(cost.money),
                dict(cost.tokens),
                Decimal(cost.metered_money),
            ),
            gates={f"{g.stage}/{g.gate_id}": str(g.action) for g in gates},
            open=tuple(open_stages),
        )

    def to_payload(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "mode": self.mode,
            "lines": self.lines,
            "promised": self.promised.to_dict(),
            **({"gates": self.gates} if self.gates else {}),
            **({"open": list(self.open)} if self.open else {}),
        }

    @classmethod
    def from_payload(cls, data: dict[str, Any], seq: int) -> Contract:
        return cls(
            fingerprint=data["fingerprint"],
            mode=data["mode"],
            lines=dict(data["lines"]),
            promised=Usage.from_dict(data["promised"]),
            seq=seq,
            gates=dict(data.get("gates", {})),
            open=tuple(data.get("open", ())),
        )

    def continues(self, stage: str, call_id: str, policy: str, action: str, confirmed: bool) -> bool:  # fmt: skip
        """Whether a call the plan could not list continues it: made by a stage whose calls
        are made as it goes, and not a call never guessed about unless a person confirms it
        at its gate."""
        return (
            stage in self.open
            and f"{stage}/{call_id}" not in self.lines
            and action in CALLING
            and (confirmed or policy not in GUARDED_POLICIES)
        )

    def difference(self, stage: str, call_id: str, tool: str, policy: str, action: str) -> Difference | None:  # fmt: skip
        """How the engine's decision for one call departs from the plan's line, if it does."""
        if action == Action.REPLAY:
            # A result this run recorded, handed back without touching anything outside: the
            # call it replays was held to the plan (or departed from it) when it was made.
            return None
        planned = self.lines.get(f"{stage}/{call_id}", "")
        if planned and _kind(planned) == _kind(action):
            return None
        if self.bound and planned in CALLING and action in DOING_LESS:
            # An upgrade branch's plan could not know its requests before its stages ran
            # ("call, or reuse if the request comes out unchanged"): what it found made
            # already, or was told to skip, is less than promised, never a departure.
            return None
        if planned in CALLING and action == Action.REUSE:
            # Doing less than promised: the call was made and confirmed already, by this very
            # resumed work when its stage ran again after a gate's answer (its usage was
            # recorded then), and what it made is reused. Never a departure from the plan.
            return None
        unpromised_call = action in CALLING and (not planned or planned not in CALLING)
        return Difference(
            stage,
            call_id,
            tool,
            planned,
            str(action),
            stop_before=unpromised_call and policy in GUARDED_POLICIES,
        )

    def verdict_payload(self, used: Usage) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "mode": self.mode,
            "promised": self.promised.to_dict(),
            "used": used.to_dict(),
        }

    @property
    def bound(self) -> bool:
        """Whether the plan's calls are an upper bound rather than exact: an upgrade branch
        re-runs stages with new inputs, whose requests (and so keys) nobody knew before."""
        return self.mode == ApprovalMode.UPGRADE

    def shortfall(self, used: Usage) -> str:
        """What the finished work used that the plan did not price ("" when it matches): on
        an exact plan any difference, on an upper bound only doing more or spending more."""
        problems = []
        # What continued the plan in a stage whose calls are made as they go is not held to
        # its lines (there were none to hold it to); the verdict records it all the same.
        listed = {t: n - used.beyond.get(t, 0) for t, n in used.calls.items()}
        for what, planned, actual in (
            ("calls", self.promised.calls, {t: n for t, n in listed.items() if n}),
            ("reconcile questions", self.promised.queries, used.queries),
        ):
            for tool in sorted(set(planned) | set(actual)):
                more = actual.get(tool, 0) > planned.get(tool, 0)
                if more or (not self.bound and planned.get(tool, 0) != actual.get(tool, 0)):
                    problems.append(
                        f"{tool}: {actual.get(tool, 0)} {what}, the plan said {planned.get(tool, 0)}"
                    )
        # Tokens, and the money they cost, are estimated before a model answers (from the
        # same call's last answer): not a departure when a model says more or less; the
        # verdict records both. What is priced per call is held to the plan.
        fixed_used = used.money - used.metered_money - used.beyond_money
        fixed_promised = self.promised.money - self.promised.metered_money
        if fixed_used > fixed_promised:
            problems.append(
                f"cost {money(used.money)} is above the plan's {money(self.promised.money)}"
            )
        return "; ".join(problems)


# Events that may carry the contract of the work that follows them.
CARRIERS = (Event.Type.RESUMED, Event.Type.RUN_CREATED)


def active(run: Run) -> tuple[Contract | None, bool]:
    """The contract the run's current work is bound by, and whether it was already broken.

    A first execution (attempt 0 of a root run) has none and costs no query; otherwise the
    newest carrier event decides (a strict resume's RESUMED, else a branch's RUN_CREATED)."""
    if run.attempt == 0 and run.parent_id is None:
        return None, False
    carrier = (
        Event.objects.filter(run=run, type__in=CARRIERS)
        .order_by("-seq")
        .only("seq", "type", "payload")
        .first()
    )
    if carrier is None:
        return None, False
    # A long plan's promise went to an artifact with the payload: read whole.
    promise = read(carrier, whole=True).contract
    if promise is None:
        return None, False
    seq = carrier.seq
    deviated = Event.objects.filter(run=run, seq__gt=seq, type=Event.Type.PLAN_DEVIATED).exists()
    return Contract.from_payload(promise, seq), deviated


# Events that record what a stage attempt used: VERIFIED for the attempt that verified, and
# GATE_OPENED for one that stopped to ask a human (its stage runs again after the answer, and
# reuses what it made before the gate, so nothing is counted twice).
USAGE_CARRIERS = (Event.Type.VERIFIED, Event.Type.GATE_OPENED)


def gates_asked_since(run: Run, contract: Contract) -> int:
    """How many gates the resumed work opened: a gate the plan said was answered is never
    among them (asking.py records that as a departure)."""
    return Event.objects.filter(run=run, seq__gt=contract.seq, type=Event.Type.GATE_OPENED).count()


def used_since(run: Run, contract: Contract) -> Usage:
    """What the resumed work's stage attempts used, summed from the events that record it."""
    total = Usage()
    carriers = Event.objects.filter(run=run, seq__gt=contract.seq, type__in=USAGE_CARRIERS).only(
        "type", "payload"
    )
    for carrier in carriers:
        total.add(Usage.from_dict(read(carrier, whole=True).usage))
    return total


__all__ = [
    "Action",
    "Contract",
    "Difference",
    "Usage",
    "active",
    "gates_asked_since",
    "used_since",
]

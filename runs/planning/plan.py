"""The reconcile plan as a value: what the planner computes, a page shows, a stored plan
keeps (to_dict/from_dict) and an approval compares by fingerprint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from runs.planning.replay import STOPPING, Action, StopKind
from runs.quantities import at


@dataclass
class ArtifactLine:
    stage: str
    checkpoint: str
    uri: str
    ok: bool
    reason: str = ""


@dataclass
class EffectLine:
    stage: str
    call_id: str
    tool: str
    policy: str
    status: str  # the ledger's status, or "none" when no effect row exists yet
    delivery_key: str
    external_id: str
    answer: str  # what the ledger or the target says
    action: str
    cost: str
    # The engine asks the target once more right before this call (a RECONCILE_FIRST effect
    # the target did not hold when the plan was computed): part of what the resume uses.
    queries: int = 0
    # Why a stopping line stops (replay.StopKind), for machines; "" otherwise, and in plans
    # stored before it existed.
    kind: str = ""
    # A call made with a reviewer's edits: what changed, by whom, the price asked
    # (runs/gates/recorded.py, edited); "" otherwise.
    edited: str = ""
    # Why a stopping line stops, for people: the plan's blocker it puts in `blockers`, so a
    # page knows which blocker is whose without reading its words; "" otherwise, and in plans
    # stored before it.
    reason: str = ""
    # A retry under the same key at a target that does not deduplicate (a model): the first
    # request may have been billed too (model_lines.may_bill_twice).
    may_bill_twice: bool = False
    # How a person names the act (the tool's verb, "publish") and where it acts
    # ("acct-42@devblog": the effect's target, or its approved confirmation's; "" for a call
    # not made yet): the words of runs/planning/acts.py. Descriptions, not facts: outside the
    # fingerprint, and "" in plans stored before them.
    verb: str = ""
    target: str = ""


@dataclass
class GateLine:
    """What the resume does about one gate of the stages it re-runs (gates.decision): use the
    recorded answer, never asking again, or ask (the run will wait for a human)."""

    stage: str
    gate_id: str
    kind: str  # GateKind, or "" for a gate the stage declares but never asked yet
    action: str  # GateAction
    said: str
    role: str = ""


@dataclass
class Cost:
    tool_calls: int = 0
    money: str = "0"
    meters: dict[str, int] = field(default_factory=dict)
    # Per tool: the calls made, and the reconcile questions asked before a call.
    calls: dict[str, int] = field(default_factory=dict)
    queries: dict[str, int] = field(default_factory=dict)
    # Model calls (runs/planning/model_lines.py): the tokens they are expected to use
    # (prompt, completion, cached), and the part of `money` those tokens cost. Estimates.
    tokens: dict[str, int] = field(default_factory=dict)
    metered_money: str = "0"
    # The part of `money` spent on retries a target may bill a second time (a model's:
    # model_lines.may_bill_twice), and how many they are: a plan that says "makes nothing
    # twice" beside them would contradict its own lines.
    billed_twice: int = 0
    billed_twice_money: str = "0"


@dataclass
class DriftLine:
    input: str
    pinned: str
    current: str


@dataclass
class MadeAgain:
    """An effect the run already made that an upgrade branch would make again under a new key
    (made_again.py): one of the upgrade's warnings, as fields a page reads."""

    run: str  # the public id of the run that made it
    tool: str
    call_id: str
    made_as: str  # the external id the target gave it
    stage: str  # the stage the branch re-runs it in
    verb: str  # the tool's verb ("publish")

    def __str__(self) -> str:
        return (
            f"{self.run} already made {self.tool} ({self.call_id}) as {self.made_as}; the branch "
            f"re-runs {self.stage} afresh and will {self.verb} again under a new key: "
            "a second one, the first stays"
        )


@dataclass
class Upgrade:
    available: bool
    reason: str
    branch_checkpoint: str | None = None
    branch_stage: str = ""
    stages_rerun: list[str] = field(default_factory=list)
    inputs: dict[str, str] = field(default_factory=dict)
    # A plan stored before the records existed keeps its warnings as sentences: shown as they
    # are, never parsed.
    warnings: list[MadeAgain | str] = field(default_factory=list)
    cost: Cost = field(default_factory=Cost)
    # What the branch will do about each call of the stages it re-runs: its contract.
    effects: list[EffectLine] = field(default_factory=list)
    gates: list[GateLine] = field(default_factory=list)

    def warnings_data(self) -> list[dict[str, str] | str]:
        """The warnings as JSON, as the events that start a branch record them."""
        return [asdict(w) if isinstance(w, MadeAgain) else w for w in self.warnings]


@dataclass
class Plan:
    run: str
    run_pk: int
    pipeline: str
    status: str
    resumable: bool
    not_resumable_reason: str
    run_version: int
    last_seq: int
    checkpoint: str | None
    checkpoint_stage: str
    checkpoint_reason: str
    fallbacks: list[str]
    next_stage: str
    tail_events: int
    tail_summary: list[str]
    artifacts: list[ArtifactLine]
    stages_skipped: list[str]
    stages_reexecuted: list[str]
    effects: list[EffectLine]
    blockers: list[str]
    drift: list[DriftLine]
    cost_resume: Cost
    cost_fresh: Cost
    upgrade: Upgrade
    fingerprint: str = ""
    gates: list[GateLine] = field(default_factory=list)
    # The stages it re-runs whose calls are made as they go (no declared calls: an agent
    # loop, say): what they recorded is listed, and what the model asks next is not known
    # before it answers, so further calls there continue the plan (contract.Contract.open).
    open_stages: list[str] = field(default_factory=list)
    # The question the run stopped on, asked again showing other than what its answer was
    # given to (a random id in it): a blocker no effect line holds (divergence.py).
    question_diverged: str = ""

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)

    @property
    def can_strict(self) -> bool:
        return self.resumable and not self.blocked

    @property
    def branchable(self) -> bool:
        """Blocked only by a stage that diverged (divergence.py): a strict resume would run it
        again and ask the same, while a new branch runs it afresh, so an upgrade may still be
        approved. Any other blocker (an outcome nobody knows) is one for a branch too."""
        stopping = [e for e in self.effects if e.action in STOPPING]
        if not stopping:
            return bool(self.question_diverged)
        return all(e.kind == StopKind.DIVERGED for e in stopping)

    @property
    def can_upgrade(self) -> bool:
        return self.resumable and (not self.blocked or self.branchable) and self.upgrade.available

    @property
    def reused(self) -> list[EffectLine]:
        return [e for e in self.effects if e.action in (Action.REUSE, Action.RECORD_FOUND)]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """The value back from its stored form (a stored plan is shown, never re-derived)."""
        data = dict(data)
        data["artifacts"] = [ArtifactLine(**a) for a in data["artifacts"]]
        data["effects"] = [EffectLine(**e) for e in data["effects"]]
        data["drift"] = [DriftLine(**d) for d in data["drift"]]
        data["cost_resume"] = Cost(**data["cost_resume"])
        data["cost_fresh"] = Cost(**data["cost_fresh"])
        upgrade = dict(data["upgrade"])
        upgrade["cost"] = Cost(**upgrade["cost"])
        upgrade["effects"] = [EffectLine(**e) for e in upgrade["effects"]]
        upgrade["gates"] = [GateLine(**g) for g in upgrade.get("gates", [])]
        upgrade["warnings"] = [
            MadeAgain(**w) if isinstance(w, dict) else str(w) for w in upgrade["warnings"]
        ]
        data["upgrade"] = Upgrade(**upgrade)
        data["gates"] = [GateLine(**g) for g in data.get("gates", [])]
        return cls(**data)

    def fingerprint_basis(self) -> dict[str, Any]:
        data = self.to_dict()
        data.pop("fingerprint", None)
        # A plan without gates keeps the fingerprint it had before gates existed, so a plan
        # stored then can still be approved.
        if not data["gates"]:
            del data["gates"]
        if not data["upgrade"]["gates"]:
            del data["upgrade"]["gates"]
        # Likewise a plan without an edited call, or a line that does not stop: its lines keep
        # the basis they had.
        for line in [*data["effects"], *data["upgrade"]["effects"]]:
            for name in ("edited", "reason", "may_bill_twice"):
                if not line[name]:
                    del line[name]
            del line["verb"], line["target"]
        if not data["open_stages"]:
            del data["open_stages"]
        if not data["question_diverged"]:
            del data["question_diverged"]
        # Model tokens and what they cost are estimates from the pipeline's latest answers
        # (model_lines.py), not facts of this run: another run's answer must not move the
        # fingerprint. A plan without model calls keeps the fingerprint it always had.
        for cost in (data["cost_resume"], data["cost_fresh"], data["upgrade"]["cost"]):
            estimated = Decimal(cost.pop("metered_money"))
            del cost["tokens"]
            # What may be billed twice is said of the lines already (may_bill_twice).
            del cost["billed_twice"], cost["billed_twice_money"]
            if estimated:
                cost["money"] = str(at(Decimal(cost["money"]) - estimated))
        return data

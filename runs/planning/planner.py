"""The reconcile planner: computes, from facts, what a resume of a run would do.

    load the run → find the longest verified prefix of checkpoints (artifacts still exist and
    hash the same; an altered one invalidates its checkpoint and everything after it) → read
    only the events after the chosen checkpoint → reconcile each unsettled effect by its
    replay policy (the only outside calls are reconcile *queries*) → compare pinned inputs
    with current ones → list what is skipped, reused and re-executed, with the cost.

Like Django's migration_plan(), it changes nothing: the plan is a value. resume.py applies an
approved plan, after checking the plan's fingerprint still matches the facts.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from runs.ledger import artifacts
from runs.ledger.chain import canonical_json
from runs.ledger.checkpoints import latest_checkpoint, manifest_problems
from runs.models import Checkpoint, Effect, Event, ReplayPolicy, Run
from runs.pipeline import Call, Pipeline, registry
from runs.planning.replay import CALLING, Action, Recorded, asks_target, decide

__all__ = ["Action", "Plan", "compute_plan", "fresh_cost"]


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


@dataclass
class Cost:
    tool_calls: int = 0
    money: str = "0"
    meters: dict[str, int] = field(default_factory=dict)
    # Per tool: the calls made, and the reconcile questions asked before a call.
    calls: dict[str, int] = field(default_factory=dict)
    queries: dict[str, int] = field(default_factory=dict)


@dataclass
class DriftLine:
    input: str
    pinned: str
    current: str


@dataclass
class Upgrade:
    available: bool
    reason: str
    branch_checkpoint: str | None = None
    branch_stage: str = ""
    stages_rerun: list[str] = field(default_factory=list)
    inputs: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    cost: Cost = field(default_factory=Cost)
    # What the branch will do about each call of the stages it re-runs: its contract.
    effects: list[EffectLine] = field(default_factory=list)


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

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)

    @property
    def can_strict(self) -> bool:
        return self.resumable and not self.blocked

    @property
    def can_upgrade(self) -> bool:
        return self.resumable and not self.blocked and self.upgrade.available

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
        data["upgrade"] = Upgrade(**upgrade)
        return cls(**data)

    def fingerprint_basis(self) -> dict[str, Any]:
        data = self.to_dict()
        data.pop("fingerprint", None)
        return data


# --- Checkpoint selection ------------------------------------------------------------------


def _candidate_checkpoints(run: Run, pipeline: Pipeline) -> list[tuple[str, Checkpoint]]:
    """Per stage, in pipeline order, the newest checkpoint this run can build on (its own,
    then those inherited through its branch point). The list stops at the first stage without
    one, or at a checkpoint older than its predecessor's (left over from before a fallback)."""
    chosen: list[tuple[str, Checkpoint]] = []
    for stage in pipeline.stage_names:
        cp = latest_checkpoint(run, stage)
        if cp is None:
            break
        if chosen:
            prev = chosen[-1][1]
            if cp.run_id == prev.run_id and cp.last_seq < prev.last_seq:
                break
            if cp.run_id != prev.run_id and prev.run_id == run.pk:
                break  # an inherited checkpoint cannot follow one of this run's own
        chosen.append((stage, cp))
    return chosen


def _verified_prefix(
    run: Run, pipeline: Pipeline
) -> tuple[Checkpoint | None, list[ArtifactLine], list[str]]:
    """The longest prefix of stages whose checkpoints' manifests and artifacts still verify."""
    lines: list[ArtifactLine] = []
    fallbacks: list[str] = []
    chosen: Checkpoint | None = None
    candidates = _candidate_checkpoints(run, pipeline)
    altered = manifest_problems([cp for _, cp in candidates])
    for index, (stage, cp) in enumerate(candidates):
        checks = [
            artifacts.verify(entry["uri"], entry["sha256"])
            for entry in cp.manifest.get("artifacts", [])
        ]
        lines += [ArtifactLine(stage, cp.id, c.uri, c.ok, c.reason) for c in checks]
        bad = [c for c in checks if not c.ok]
        if cp.id in altered:  # its manifest is not the one its VERIFIED event recorded
            bad.insert(0, artifacts.Check(cp.id, False, altered[cp.id]))
        if bad:
            dropped = [c.id for _, c in candidates[index:]]
            fallbacks.append(
                f"{cp.id} is not usable: {bad[0].reason}; falling back past {', '.join(dropped)}"
            )
            break
        chosen = cp
    return chosen, lines, fallbacks


# --- Effects ---------------------------------------------------------------------------------


def _own_effects(run: Run, stages: list[str]) -> dict[tuple[str, str], Effect]:
    """The newest effect per (stage, call) this run made. An ancestor's effects in the stages
    a branch re-runs were made with other inputs, so they say nothing about the branch's
    calls (should a key match anyway, the engine reuses it and the plan's cost was an upper
    bound)."""
    found: dict[tuple[str, str], Effect] = {}
    for effect in Effect.objects.filter(run=run, stage__in=stages).order_by("id"):
        found[(effect.stage, effect.call_id)] = effect
    return found


def _effect_line(stage: str, call_id: str, tool, effect: Effect | None) -> tuple[EffectLine, str]:
    """The resume action for one expected call (replay.decide, asking the target where the
    decision needs it); returns the line and a blocker (or "")."""
    recorded = Recorded.of(effect)
    answer, unanswered = None, ""
    if asks_target(tool.policy, recorded):
        try:
            answer = tool.reconcile(effect)
        except Exception as exc:  # a target that is down or slow blocks; it never guesses
            unanswered = str(exc) or type(exc).__name__
    decision = decide(
        tool=tool.name,
        call_id=call_id,
        policy=tool.policy,
        recorded=recorded,
        answer=answer,
        unanswered=unanswered,
        verb=tool.verb,
        target=effect.target if effect else "",
    )
    line = EffectLine(
        stage=stage,
        call_id=call_id,
        tool=tool.name,
        policy=str(tool.policy),
        status=effect.status if effect else "none",
        delivery_key=effect.delivery_key if effect else "",
        external_id=decision.external_id or (effect.external_id if effect else ""),
        answer=decision.answer,
        action=str(decision.action),
        cost=str(tool.cost) if decision.calls else "0",
        # The answer was "not there": the engine asks once more before it calls.
        queries=1 if answer is not None and decision.calls else 0,
    )
    return line, decision.reason


def _cost(pipeline: Pipeline, lines: list[EffectLine]) -> Cost:
    cost = Cost()
    money = Decimal(0)
    for line in lines:
        if line.queries:
            cost.queries[line.tool] = cost.queries.get(line.tool, 0) + line.queries
        if line.action not in CALLING:
            continue
        tool = pipeline.tool(line.tool)
        cost.tool_calls += 1
        cost.calls[tool.name] = cost.calls.get(tool.name, 0) + 1
        money += tool.cost
        if tool.meter:
            cost.meters[tool.meter] = cost.meters.get(tool.meter, 0) + 1
    cost.money = str(money.quantize(Decimal("0.0001")))
    return cost


def _call_line(stage: str, call: Call, pipeline: Pipeline) -> EffectLine:
    """A call that nothing has been recorded for: it will be made."""
    tool = pipeline.tool(call.tool)
    action = Action.RERUN if tool.policy == ReplayPolicy.SAFE else Action.CALL
    return EffectLine(
        stage, call.call_id, tool.name, str(tool.policy), "none", "", "", "", str(action),
        str(tool.cost),
    )  # fmt: skip


def fresh_cost(pipeline: Pipeline) -> Cost:
    """What a blind retry from step one would spend: every expected call again."""
    lines = [_call_line(s.name, call, pipeline) for s in pipeline.stages for call in s.calls]
    return _cost(pipeline, lines)


def _expected_lines(
    run: Run, pipeline: Pipeline, stages: list[str]
) -> tuple[list[EffectLine], list[str]]:
    effects = _own_effects(run, stages)
    lines, blockers = [], []
    for stage_name in stages:
        stage = pipeline.stage(stage_name)
        known = {c.call_id for c in stage.calls}
        calls = list(stage.calls)
        # Calls the stage made that its declaration does not list are still accounted for.
        calls += [
            Call(call_id, e.tool)
            for (s, call_id), e in effects.items()
            if s == stage_name and call_id not in known
        ]
        for call in calls:
            line, blocker = _effect_line(
                stage_name,
                call.call_id,
                pipeline.tool(call.tool),
                effects.get((stage_name, call.call_id)),
            )
            lines.append(line)
            if blocker:
                blockers.append(blocker)
    return lines, blockers


# --- The plan ------------------------------------------------------------------------------


def _tail(run: Run, after_seq: int) -> tuple[int, list[str]]:
    """Only the events after the chosen checkpoint: the run's history before it is settled.

    seq is gap-free, so the tail's length is last_seq - after_seq without counting rows; only
    the last dozen are read (a run with no checkpoint yet can have a million)."""
    last = list(
        Event.objects.filter(run=run, seq__gt=after_seq)
        .order_by("-seq")
        .values_list("seq", "type", "stage", "payload")[:12]
    )
    summary = []
    for seq, type_, stage, payload in reversed(last):
        what = payload.get("call") or payload.get("reason") or payload.get("error") or ""
        summary.append(f"#{seq} {type_} {stage} {what}".strip())
    return run.last_seq - after_seq, summary


def compute_plan(run: Run) -> Plan:
    # Load the run: a caller's instance may predate the latest append, and a plan mixing its
    # stale version/last_seq with the log's fresh tail would carry a fingerprint that no
    # approval (which always re-plans from the database) can ever match.
    run = Run.objects.get(pk=run.pk)
    pipeline = registry.get(run.pipeline)
    resumable = run.is_resumable
    reason = (
        ""
        if resumable
        else f"{run.public_id} is {run.get_status_display().lower()}: "
        + (
            "it is still active; wait for it to finish or be interrupted"
            if run.is_active
            else "there is nothing to resume"
        )
    )

    chosen, artifact_lines, fallbacks = _verified_prefix(run, pipeline)
    if chosen is None:
        next_stage = pipeline.stage_names[0]
        checkpoint_reason = "no verified checkpoint: the resume starts at the first stage"
    else:
        next_stage = chosen.next_stage
        checkpoint_reason = (
            f"latest checkpoint whose artifacts all verify ({len(chosen.artifacts)} checked)"
            if not fallbacks
            else "the newest checkpoint that still verifies"
        )
    after_seq = chosen.last_seq if chosen is not None and chosen.run_id == run.pk else 0
    tail_count, tail_summary = _tail(run, after_seq)

    stages_all = list(pipeline.stage_names)
    rerun = list(pipeline.stages_from(next_stage)) if next_stage else []
    skipped = [s for s in stages_all if s not in rerun]
    lines, blockers = _expected_lines(run, pipeline, rerun)

    drift = [DriftLine(name, old, new) for name, (old, new) in pipeline.drift(run.inputs).items()]
    upgrade = _upgrade(run, pipeline, chosen, drift, resumable, lines)

    plan = Plan(
        run=run.public_id,
        run_pk=run.pk,
        pipeline=run.pipeline,
        status=run.status,
        resumable=resumable,
        not_resumable_reason=reason,
        run_version=run.version,
        last_seq=run.last_seq,
        checkpoint=chosen.id if chosen else None,
        checkpoint_stage=chosen.stage if chosen else "",
        checkpoint_reason=checkpoint_reason,
        fallbacks=fallbacks,
        next_stage=next_stage,
        tail_events=tail_count,
        tail_summary=tail_summary,
        artifacts=artifact_lines,
        stages_skipped=skipped,
        stages_reexecuted=rerun,
        effects=lines,
        blockers=blockers,
        drift=drift,
        cost_resume=_cost(pipeline, lines),
        cost_fresh=fresh_cost(pipeline),
        upgrade=upgrade,
    )
    plan.fingerprint = hashlib.sha256(canonical_json(plan.fingerprint_basis()).encode()).hexdigest()
    return plan


def _upgrade(
    run: Run,
    pipeline: Pipeline,
    chosen: Checkpoint | None,
    drift: list[DriftLine],
    resumable: bool,
    strict_lines: list[EffectLine],
) -> Upgrade:
    if not drift:
        return Upgrade(False, "no input has changed since this run pinned its inputs")
    changed = [d.input for d in drift]
    first = pipeline.first_affected(changed)
    if not first:
        return Upgrade(False, f"no stage consumes the changed input(s) {', '.join(changed)}")
    first_index = pipeline.index(first)
    # Branch at the last verified checkpoint before the first affected stage.
    point: Checkpoint | None = None
    if first_index > 0 and chosen is not None:
        prefix = _candidate_checkpoints(run, pipeline)
        for stage, cp in prefix:
            if pipeline.index(stage) < first_index and pipeline.index(stage) <= pipeline.index(
                chosen.stage
            ):
                point = cp
    branch_stage = pipeline.next_stage(point.stage) if point else pipeline.stage_names[0]
    rerun = list(pipeline.stages_from(branch_stage))
    new_inputs = dict(run.inputs)
    for d in drift:
        new_inputs[d.input] = d.current
    # Effects the parent already made in stages the branch re-runs would happen again under a
    # new key whenever the branch's request differs (new facts → new draft → new revision).
    warnings = []
    # An effect the ledger never confirmed may still have happened: what this plan's reconcile
    # query found on the target counts as made (the approval records it on this run).
    found = {
        (line.stage, line.call_id): line.external_id
        for line in strict_lines
        if line.action == Action.RECORD_FOUND
    }
    parent_effects = _own_effects(run, rerun)
    for (stage, call_id), effect in sorted(parent_effects.items()):
        made_as = effect.external_id
        if effect.status != Effect.Status.CONFIRMED:
            made_as = found.get((stage, call_id), "")
            if not made_as:
                continue
        if effect.policy in (ReplayPolicy.RECONCILE_FIRST, ReplayPolicy.NEVER):
            warnings.append(
                f"{run.public_id} already made {effect.tool} ({call_id}) as {made_as}; "
                f"the branch re-runs {stage} with new inputs and will make it again under a new "
                f"key (e.g. a second article for the new revision)"
            )
    lines = [
        _call_line(stage.name, call, pipeline)
        for stage in pipeline.stages
        if stage.name in rerun
        for call in stage.calls
    ]
    return Upgrade(
        available=resumable,
        reason=(
            f"{', '.join(f'{d.input} {d.pinned} → {d.current}' for d in drift)}: a new branch "
            f"re-runs {first} and everything after it"
        )
        if resumable
        else "the run is not resumable",
        branch_checkpoint=point.id if point else None,
        branch_stage=branch_stage,
        stages_rerun=rerun,
        inputs=new_inputs,
        warnings=warnings,
        cost=_cost(pipeline, lines),
        effects=lines,
    )

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

from dataclasses import replace

from runs.events import read
from runs.gates import recorded, reopen
from runs.gates.sent_back import sent_back
from runs.ledger import artifacts, derived
from runs.ledger.chain import digest
from runs.ledger.checkpoints import latest_checkpoint, manifest_problems
from runs.models import Checkpoint, Effect, Event, Gate, Run
from runs.pipeline import Call, Pipeline, registry
from runs.planning import costs, disagreement, divergence, gate_lines, made_again, model_lines
from runs.planning.plan import ArtifactLine, DriftLine, EffectLine, Plan, Upgrade
from runs.planning.replay import Action, Recorded, asks_target, decide_on
from runs.planning.replay_log import EMPTY, replay_logs

__all__ = ["Action", "Plan", "compute_plan"]


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


def _effect_line(
    stage: str,
    call_id: str,
    tool,
    effect: Effect | None,
    gate: Gate | None,
    edited_by: str,
    confirmed_by: str,
    made: bool = False,
) -> EffectLine:
    """The resume action for one expected call (replay.decide_on, asking the target where the
    decision needs it; who recorded a failed effect, read from its events), priced by the
    arguments it is made with (a reviewer's edits, if its confirmation was answered so); a
    line that stops says why in `reason`, the plan's blocker."""
    decision, answer = decide_on(
        tool, call_id, effect, edited_by=edited_by, confirmed_by=confirmed_by, made=made
    )
    reuse_asks = decision.action == Action.REUSE and asks_target(
        tool.policy, Recorded.of(effect, edited_by=edited_by)
    )
    price = tool.price_of(recorded.call_args(gate, effect))
    line = EffectLine(
        stage=stage,
        call_id=call_id,
        tool=tool.name,
        policy=str(tool.policy),
        status=effect.status if effect else "none",
        delivery_key=effect.delivery_key if effect else "",
        external_id=decision.external_id or (effect.external_id if effect else ""),
        answer=model_lines.answer(tool, decision),
        action=str(decision.action),
        cost=str(price) if decision.calls else "0",
        # The answer was "not there": the engine asks once more before it calls; and before
        # it reuses what a supervisor confirmed (replay.asks_target), answered or not.
        queries=1 if (answer is not None and decision.calls) or reuse_asks else 0,
        kind=str(decision.kind or ""),
        edited=recorded.edited(gate, effect),
        reason=decision.reason,
        may_bill_twice=model_lines.may_bill_twice(tool, decision),
        verb=tool.verb,
        target=effect.target if effect else str((gate.call if gate else {}).get("target", "")),
    )
    return line


UPPER_BOUND = "call, or reuse if the request comes out unchanged"


def _bound(line: EffectLine) -> EffectLine:
    if line.action != Action.CALL:
        return line  # SAFE calls simply re-run
    return replace(line, answer=UPPER_BOUND)


def _expected_lines(
    run: Run, pipeline: Pipeline, stages: list[str], after_seq: int = 0
) -> tuple[list[EffectLine], list[str], dict[tuple[str, str], str]]:
    """The lines, the blockers, and what the targets said of the confirmed calls they refused
    ((stage, gate id) -> error: the gate lines say it)."""
    effects = _own_effects(run, stages)
    # Their events are all after the chosen checkpoint: the stages it re-runs ran after it.
    said = derived.said_of([run.pk], effects.values(), after_seq=after_seq)
    disagreeing = disagreement.disagreeing(effects, said)
    refused = reopen.confirmed_calls(run, effects.values(), said)
    approved, rejected = recorded.verdicts(run, stages)
    # What each stage recorded in this run: the same value the engine replays from.
    logs = replay_logs(run.pk, stages, after_seq=after_seq)
    lines, blockers = [], []
    for stage_name in stages:
        log = logs.get(stage_name, EMPTY)
        logged = [
            *(Call(c.call_id, c.tool) for c in log.calls.values()),
            # Calls a resume was stopped before, the plan not having listed them.
            *(Call(call_id, tool) for call_id, tool in log.stopped.items()),
        ]
        for call in costs.stage_calls(pipeline.stage(stage_name), effects, logged):
            reason = disagreeing.get((stage_name, call.call_id))
            if reason:
                effect = effects[(stage_name, call.call_id)]
                lines.append(disagreement.blocked_line(stage_name, call.call_id, effect, reason))
                blockers.append(reason)
                continue
            effect = effects.get((stage_name, call.call_id))
            if effect is None and (stage_name, call.call_id) in rejected:
                gate = rejected[(stage_name, call.call_id)]
                lines.append(gate_lines.rejected_line(stage_name, pipeline.tool(call.tool), gate))
                continue
            key = effect.delivery_key if effect else ""
            line = _effect_line(
                stage_name,
                call.call_id,
                pipeline.tool(call.tool),
                effect,
                approved.get((stage_name, call.call_id)),
                said[key].edited_by if key in said else "",
                refused[key].by if key in refused else "",
                made=log.answered(call.call_id),
            )
            lines.append(line)
            if line.reason:
                blockers.append(line.reason)
    return lines, blockers, {(r.gate.stage, r.gate.gate_id): r.error for r in refused.values()}


# --- The plan ------------------------------------------------------------------------------


def _tail(run: Run, after_seq: int) -> tuple[int, list[str]]:
    """Only the events after the chosen checkpoint: the run's history before it is settled.

    seq is gap-free, so the tail's length is last_seq - after_seq without counting rows; only
    the last dozen are read (a run with no checkpoint yet can have a million)."""
    last = list(
        Event.objects.filter(run=run, seq__gt=after_seq)
        .order_by("-seq")
        .only("seq", "type", "stage", "payload")[:12]
    )
    summary = [
        f"#{event.seq} {event.type} {event.stage} {read(event).about()}".strip()
        for event in reversed(last)
    ]
    return run.last_seq - after_seq, summary


def _resumable(run: Run) -> tuple[bool, str]:
    """Whether the plan offers a way on, and why not when it does not."""
    back = sent_back(run)
    if back is not None:
        return False, back.reason
    return run.is_resumable, _not_resumable_reason(run)


def _not_resumable_reason(run: Run) -> str:
    if run.is_resumable:
        return ""
    if run.is_waiting:
        return (
            f"{run.public_id} is waiting for a decision at {run.current_stage}: answer its "
            "gate; there is nothing to resume"
        )
    return f"{run.public_id} {run.status_said}: " + (
        "it is still active; wait for it to finish or be interrupted"
        if run.is_active
        else "there is nothing to resume"
    )


def _start_point(chosen: Checkpoint | None, fallbacks: list[str], pipeline: Pipeline):
    """The stage the resume starts at, and why that checkpoint was chosen."""
    if chosen is None:
        return (
            pipeline.stage_names[0],
            "no verified checkpoint: the resume starts at the first stage",
        )
    if fallbacks:
        return chosen.next_stage, "the newest checkpoint that still verifies"
    return (
        chosen.next_stage,
        f"latest checkpoint whose artifacts all verify ({len(chosen.artifacts)} checked)",
    )


def compute_plan(run: Run) -> Plan:
    # Load the run: a caller's instance may predate the latest append, and a plan mixing its
    # stale version/last_seq with the log's fresh tail would carry a fingerprint that no
    # approval (which always re-plans from the database) can ever match.
    run = Run.objects.get(pk=run.pk)
    pipeline = registry.get(run.pipeline)
    resumable, reason = _resumable(run)

    chosen, artifact_lines, fallbacks = _verified_prefix(run, pipeline)
    next_stage, checkpoint_reason = _start_point(chosen, fallbacks, pipeline)
    after_seq = chosen.last_seq if chosen is not None and chosen.run_id == run.pk else 0
    tail_count, tail_summary = _tail(run, after_seq)

    stages_all = list(pipeline.stage_names)
    rerun = list(pipeline.stages_from(next_stage)) if next_stage else []
    skipped = [s for s in stages_all if s not in rerun]
    lines, blockers, refused = _expected_lines(run, pipeline, rerun, after_seq)
    diverged = divergence.stopped(run)
    if diverged is not None:
        lines = divergence.block(lines, diverged)
        blockers.append(diverged.reason)
    question = diverged.call if diverged is not None and divergence.of_question(diverged) else ""

    drift, unresolved = _drift(run, pipeline)
    upgrade = unresolved or _upgrade(
        run, pipeline, chosen, drift, resumable, lines, diverged.stage if diverged else ""
    )

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
        cost_resume=costs.cost_of(pipeline, lines),
        cost_fresh=costs.fresh_cost(pipeline, _own_effects(run, stages_all), lines),
        upgrade=upgrade,
        gates=gate_lines.strict_lines(run, pipeline, rerun, refused),
        open_stages=pipeline.open_stages(rerun),
        question_diverged=question,
    )
    plan.fingerprint = digest(plan.fingerprint_basis())
    return plan


def _drift(run: Run, pipeline: Pipeline) -> tuple[list[DriftLine], Upgrade | None]:
    """The inputs that drifted, and the refused upgrade when one cannot be resolved now (its
    source lost the topic): a strict resume keeps what the run pinned and needs no resolver,
    an upgrade to inputs nobody can resolve cannot be planned."""
    unresolved: dict[str, str] = {}
    changed = pipeline.drift(run.inputs, unresolved)
    drift = [DriftLine(name, old, new) for name, (old, new) in changed.items()]
    if not unresolved:
        return drift, None
    why = "; ".join(f"input {name} cannot be resolved now: {e}" for name, e in unresolved.items())
    return drift, Upgrade(
        False, f"{why}: no upgrade until it can (a strict resume keeps the pinned version)"
    )


def _branch_point(
    run: Run, pipeline: Pipeline, chosen: Checkpoint | None, first_index: int
) -> Checkpoint | None:
    """The last verified checkpoint before the first affected stage (None: from the start)."""
    point: Checkpoint | None = None
    if first_index > 0 and chosen is not None:
        for stage, cp in _candidate_checkpoints(run, pipeline):
            if pipeline.index(stage) < first_index and pipeline.index(stage) <= pipeline.index(
                chosen.stage
            ):
                point = cp
    return point


def _upgrade(
    run: Run,
    pipeline: Pipeline,
    chosen: Checkpoint | None,
    drift: list[DriftLine],
    resumable: bool,
    strict_lines: list[EffectLine],
    diverged: str = "",
) -> Upgrade:
    """The branch an upgrade would start: from the first stage a drifted input affects, or
    the stage that diverged (which a branch runs afresh), whichever comes first."""
    if not drift and not diverged:
        return Upgrade(False, "no input has changed since this run pinned its inputs")
    changed = [d.input for d in drift]
    affected = [s for s in (pipeline.first_affected(changed), diverged) if s]
    if not affected:
        return Upgrade(False, f"no stage consumes the changed input(s) {', '.join(changed)}")
    first = min(affected, key=pipeline.index)
    point = _branch_point(run, pipeline, chosen, pipeline.index(first))
    branch_stage = pipeline.next_stage(point.stage) if point else pipeline.stage_names[0]
    rerun = list(pipeline.stages_from(branch_stage))
    new_inputs = dict(run.inputs)
    for d in drift:
        new_inputs[d.input] = d.current
    warnings = made_again.warnings(run, _own_effects(run, rerun), strict_lines)
    # The branch's requests are not known before its stages run with the new inputs: each
    # call is priced as a call, and may come out unchanged and be reused (contract.bound).
    lines = [
        _bound(costs.call_line(stage.name, call, pipeline))
        for stage in pipeline.stages
        if stage.name in rerun
        for call in stage.calls
    ]
    return Upgrade(
        available=resumable,
        reason=(
            ", ".join(
                [f"{d.input} {d.pinned} → {d.current}" for d in drift]
                + [f"{diverged} diverged"] * bool(diverged)
            )
            + f": a new branch re-runs {first} and everything after it"
        )
        if resumable
        else "the run is not resumable",
        branch_checkpoint=point.id if point else None,
        branch_stage=branch_stage,
        stages_rerun=rerun,
        inputs=new_inputs,
        warnings=warnings,
        cost=costs.cost_of(pipeline, lines),
        effects=lines,
        gates=gate_lines.upgrade_lines(run, pipeline, rerun),
    )

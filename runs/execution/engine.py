"""The stage job: what a worker does with one stage job.

    acquire the lease (new fencing token) → consume the run's ticket and append STARTED →
    run the stage function; every tool call goes through StageContext.call (durable_call.py:
    effect intent before, external id after) → verify the output's rules → VERIFIED +
    checkpoint (or FAILED) → queue the next stage → release the lease.

The process's heartbeat thread (leases.heartbeats) renews the lease while the stage runs.
Every write checks the token, so a worker that lost its lease stops at its next write having
written nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from datetime import UTC, datetime
from enum import StrEnum

import redis
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models.functions import Now
from rq import get_current_job

from runs import enqueue as enqueuing  # start_run takes an `enqueue` flag
from runs import ids, tracing
from runs.events import Failed, PlanKept, RunCreated, Succeeded
from runs.execution import outage, stage_log, starting, sweeper
from runs.execution.asking import StageWaiting
from runs.execution.context import StageContext
from runs.execution.durable_call import StageStopped
from runs.execution.hooks import CallHooks
from runs.ledger import artifacts, leases
from runs.ledger.append import LeaseLost, RunMove, Writer, append, create_run
from runs.ledger.checkpoints import write_checkpoint
from runs.models import Artifact, Checkpoint, Event, Run
from runs.pipeline import Pipeline, Stage, StageOutput, registry
from runs.planning import contract
from runs.planning.replay_log import EMPTY
from runs.tools import model

__all__ = ["Outcome", "StageContext", "StageStopped", "execute", "start_run", "worker_identity"]

log = logging.getLogger("runs.engine")


class Outcome(StrEnum):
    """What engine.execute() did with one stage job (the RQ job's result)."""

    # Another worker holds the run's lease; this job did nothing.
    BUSY = "busy"
    # The ticket was consumed already, or the run is not active: a duplicate or stale job.
    NOTHING_TO_DO = "nothing-to-do"
    # The run stopped for a human or with an unknown outcome (its event says why).
    STOPPED = "stopped"
    # The stage asked a human (GATE_OPENED): the run waits, without a worker or a lease.
    WAITING = "waiting"
    # The lease was taken over mid-stage; this worker wrote nothing after that.
    LEASE_LOST = "lease-lost"
    # The stage function raised, or returned something else than a StageOutput.
    FAILED = "failed"
    # The output failed a rule: no checkpoint.
    VERIFICATION_FAILED = "verification-failed"
    # VERIFIED and the checkpoint are written; the next stage is queued.
    VERIFIED = "verified"
    # The database went away while the stage ran: the run is interrupted, for a human.
    INTERRUPTED = "interrupted"


def worker_identity() -> str:
    return ids.worker_holder(socket.gethostname(), os.getpid())


# --- Starting runs -------------------------------------------------------------------------


def start_run(
    pipeline_name: str,
    inputs: dict[str, str] | None = None,
    *,
    actor: str,
    enqueue: bool = True,
) -> Run:
    """Validate, create the run with its pinned inputs, and queue its first stage."""
    pipeline = registry.get(pipeline_name)
    pinned = pipeline.resolve_inputs(dict(inputs or {}))
    ticket = uuid.uuid4().hex
    with transaction.atomic():
        run = create_run(
            pipeline.name,
            RunCreated(input_versions=pinned, stages=list(pipeline.stage_names)),
            actor=actor,
            first_stage=pipeline.stage_names[0],
            ticket=ticket,
        )
        if enqueue:
            transaction.on_commit(
                lambda: enqueuing.dispatch(run.pk, pipeline.stage_names[0], ticket)
            )
    return run


# --- Executing a stage ---------------------------------------------------------------------


def warm_up() -> None:
    """Load now what a stage job needs and a command line leaves to its first use: the
    pipelines, the model SDK their model tools call and the price table they price with
    (runs/tools/model.py). Every stage job does it before it takes its lease, so no stage
    waits on imports while it holds one (a worker does it before its first job too; the
    tests' fork server before it forks)."""
    registry.names()
    model.sdk()
    model.price_table()


def execute(
    run_pk: int,
    stage_name: str,
    ticket: str,
    *,
    holder: str | None = None,
    hooks: CallHooks | None = None,
) -> Outcome:
    """Run one stage of one run, calling `hooks` around each tool call (none by default).

    If the database connection is lost before the stage started, the job waits for the
    database and starts over: the run's ticket is still pending (or was consumed, and the
    second try finds nothing to do), so the run simply goes on once it answers."""
    holder = holder or worker_identity()
    warm_up()
    while True:
        try:
            done = _execute(run_pk, stage_name, ticket, holder, hooks or CallHooks())
        except DatabaseError as exc:
            if not outage.connection_lost(exc):
                raise
            done = None
        if done is not None:
            return done
        outage.wait_for_database(f"run-{run_pk}'s {stage_name} job", tick=_job_alive)


# The outcomes that leave the run for a human: their stage log is kept for the operator
# (runs/execution/stage_log.py); any other's is dropped.
KEEP_LOG = frozenset(
    {
        Outcome.FAILED,
        Outcome.VERIFICATION_FAILED,
        Outcome.STOPPED,
        Outcome.LEASE_LOST,
        Outcome.INTERRUPTED,
    }
)


@tracing.stage_execution  # one span per stage job, when tracing is on
def _execute(
    run_pk: int, stage_name: str, ticket: str, holder: str, hooks: CallHooks
) -> Outcome | None:
    """execute() once; None when the connection was lost before the stage started."""
    try:
        taken = starting.take(run_pk, ticket, holder)
    except leases.LeaseBusy:
        log.info(
            "run-%s is leased by another worker; job %s/%s skipped",
            run_pk,
            stage_name,
            ticket,
        )
        return Outcome.BUSY
    attempt = taken.run.attempt if taken.run is not None else 0
    with stage_log.capturing(run_pk, stage_name, taken.held.token, attempt, holder) as capture:
        outcome = _execute_held(run_pk, stage_name, ticket, holder, hooks, taken, capture)
        capture.ended(outcome and outcome.value, keep=outcome in KEEP_LOG)
        return outcome


def _execute_held(
    run_pk: int,
    stage_name: str,
    ticket: str,
    holder: str,
    hooks: CallHooks,
    taken: starting.Taken,
    capture: stage_log.Capture,
) -> Outcome | None:
    """_execute() once the lease is taken: the stage, then the lease given back."""
    held = taken.held
    writer = Writer(run_pk, held.token, holder)
    run = None
    try:
        run = starting.begin(writer, stage_name, ticket, taken)
        if run is None:
            return Outcome.NOTHING_TO_DO
        leases.heartbeats.watch(held)
        # A run read again (begin) was read without its newest checkpoint: the stage reads
        # what it builds on itself.
        newest = taken.newest if run is taken.run else None
        return _run_stage(writer, held, run, stage_name, hooks, newest, capture)
    except StageWaiting as exc:
        log.info("run-%s in %s: %s", run_pk, stage_name, exc)
        return Outcome.WAITING
    except StageStopped as exc:
        log.info("run-%s stopped in %s: %s", run_pk, stage_name, exc)
        return Outcome.STOPPED
    except LeaseLost as exc:
        log.warning("%s", exc)
        return Outcome.LEASE_LOST
    except DatabaseError as exc:
        if not outage.connection_lost(exc):
            raise
        capture.failed(exc)
        leases.heartbeats.unwatch(held)
        outage.wait_for_database(f"run-{run_pk}'s {stage_name} job", tick=_job_alive)
        if run is None:
            return None
        if _ended_unanswered(writer, stage_name):
            return Outcome.VERIFIED
        interrupted = sweeper.interrupt_lost_mid_stage(writer, stage_name)
        return Outcome.INTERRUPTED if interrupted else Outcome.LEASE_LOST
    finally:
        leases.heartbeats.unwatch(held)
        if not held.released:
            leases.release(run_pk, held.token)


def _ended_unanswered(writer: Writer, stage_name: str) -> bool:
    """Whether the stage's end committed though its answer was lost with the connection (a
    commit is durable before the server answers it): the run's last event is then this
    writer's VERIFIED of the stage, or SUCCEEDED. The run goes on as the answer would have
    let it: the next stage's job, which only the commit's answer would have queued
    (on_commit), is queued now, under the ticket the end wrote. Interrupting it instead
    would stop a run whose stage had verified and whose next had not started."""
    last = Event.objects.filter(run_id=writer.run_id).order_by("-seq").first()
    if last is None or last.token != writer.token:
        return False
    if last.type == Event.Type.SUCCEEDED:
        return True
    if last.type != Event.Type.VERIFIED or last.stage != stage_name:
        return False
    run = Run.objects.filter(pk=writer.run_id).values("ticket", "current_stage").first()
    if run and run["ticket"]:
        enqueuing.dispatch(writer.run_id, run["current_stage"], run["ticket"])
    return True


def _job_alive() -> None:
    """Tell RQ the stage job waiting for the database is alive: a job a worker took long ago
    whose ticket is still pending looks like one its worker died with (runs/execution/sweeper.py)."""
    job = get_current_job()
    if job is None:
        return
    with contextlib.suppress(redis.exceptions.RedisError):
        job.heartbeat(datetime.now(UTC), int(leases.ttl_seconds() * 3))


def _run_stage(
    writer: Writer,
    held: leases.HeldLease,
    run: Run,
    stage_name: str,
    hooks: CallHooks,
    newest: Checkpoint | None,
    capture: stage_log.Capture,
) -> Outcome:
    pipeline = registry.get(run.pipeline)
    stage = pipeline.stage(stage_name)
    bound, deviated = contract.active(run)
    ctx = StageContext(
        writer,
        run,
        pipeline,
        stage_name,
        hooks,
        held=held,
        contract=bound,
        deviated=deviated,
        replay=EMPTY if _entered_afresh(run, newest) else None,
        replay_after=newest.last_seq if newest is not None and newest.run_id == run.pk else 0,
    )
    ctx.read_upstream(newest)
    try:
        output = stage.run(ctx)
        if not isinstance(output, StageOutput):
            raise TypeError(f"stage {stage_name} returned {type(output).__name__}, not StageOutput")
    except (LeaseLost, StageStopped):
        raise  # the run's status and its event are written already, or cannot be
    except Exception as exc:
        if outage.connection_lost(exc):
            raise  # not the stage's failure: the database went away (execute() sees to it)
        capture.failed(exc)  # the stage function's traceback, for the operator
        _fail(writer, Failed(stage=stage_name, error=f"{type(exc).__name__}: {exc}"[:2000]))
        return Outcome.FAILED

    results = [rule.evaluate(output) for rule in stage.rules]
    failed = [r["name"] for r in results if not r["passed"]]
    if failed:
        # The failed rules by name, for machines; the error's words are for people only.
        refused = Failed(
            stage=stage_name, error="verification failed", rules=results, failed_rules=failed
        )
        _fail(writer, refused)
        return Outcome.VERIFICATION_FAILED
    _checkpoint(ctx, pipeline, stage, output, results)
    return Outcome.VERIFIED


def _entered_afresh(run: Run, newest: Checkpoint | None) -> bool:
    """Whether nothing happened in the run between the event the stage's ticket came with
    (the run's creation, or the previous stage's VERIFIED, as the take read it) and this
    STARTED: then the stage has no earlier attempt to replay, and reads none (the first
    execution of a stage costs no query; a re-entry reads its log: replay_log.py)."""
    if run.last_seq == 2:
        return True  # RUN_CREATED, then this STARTED
    return newest is not None and newest.run_id == run.pk and run.last_seq == newest.last_seq + 1


def _fail(writer: Writer, failed: Failed) -> None:
    append(writer, failed, move=RunMove(Run.Status.FAILED))


def _checkpoint(
    ctx: StageContext, pipeline: Pipeline, stage: Stage, output: StageOutput, results: list
) -> None:
    """VERIFIED and the checkpoint, then the next stage queued once they commit (or, at the
    end, SUCCEEDED). The lease is given up by the last of these writes, in its own write:
    the next stage's job, queued on that commit, finds it free instead of waiting for
    another commit, and the release costs no statement of its own.

    A stage ends in one write (on PostgreSQL one statement): VERIFIED, the checkpoint, its
    artifact rows, at the end SUCCEEDED, and the release. That needs the artifacts' versions
    before the write: a run never resumed writes each stage's artifacts once, as version 1
    (a stage runs again only on an approved resume, which counts an attempt); if one was
    taken all the same, that write wrote nothing, and the transaction below allocates them.
    Resumed work that ends is also held against its plan between VERIFIED and SUCCEEDED
    (_verdict), in that transaction too. Either way a worker that lost its lease leaves no
    artifact row behind (only content-addressed blobs, which nothing references), and a run
    is never verified to the end without being done."""
    run = ctx.run
    next_stage = pipeline.next_stage(stage.name)
    if not _held_to_plan(ctx, next_stage) and (run.attempt == 0 or not output.artifacts):
        rows = [
            artifacts.first_version(_artifact_name(stage, run, name), data, kind, run=run)
            for name, (data, kind) in output.artifacts.items()
        ]
        try:
            _seal(ctx, stage, output, results, next_stage, rows, riding=True)
            return
        except IntegrityError:
            if not rows:
                raise
            log.warning("run-%s %s: an artifact version was taken; allocating", run.pk, stage.name)
    with transaction.atomic():
        stored = [
            artifacts.store(_artifact_name(stage, run, name), data, kind, run=run)
            for name, (data, kind) in output.artifacts.items()
        ]
        _seal(ctx, stage, output, results, next_stage, stored, riding=False)


def _held_to_plan(ctx: StageContext, next_stage: str) -> bool:
    """Whether the run ends here with resumed work that kept to its plan so far, which
    _verdict() then holds against the plan before SUCCEEDED."""
    return not next_stage and ctx.contract is not None and not ctx.deviated


def _artifact_name(stage: Stage, run: Run, name: str) -> str:
    return f"{stage.name}/{run.public_id}/{name}"


def _seal(
    ctx: StageContext,
    stage: Stage,
    output: StageOutput,
    results: list,
    next_stage: str,
    stored: list[Artifact],
    *,
    riding: bool,
) -> None:
    """VERIFIED with the checkpoint on `stored` (their rows written with it when `riding`),
    and what follows it: the next stage queued once it commits, or the end of the run."""
    run, writer = ctx.run, ctx.writer
    ticket = uuid.uuid4().hex if next_stage else ""
    verdict = _held_to_plan(ctx, next_stage)
    manifest = {
        "inputs": {name: run.inputs.get(name) for name in stage.consumes},
        "pinned": dict(run.inputs),
        "artifacts": [
            {
                "name": name,
                "uri": a.uri,
                "sha256": a.sha256,
                "size": a.size,
                "content_type": a.content_type,
            }
            for name, a in zip(output.artifacts, stored, strict=True)
        ],
        "rules": results,
        "outputs": output.outputs,
    }
    write_checkpoint(
        writer,
        run,
        stage=stage.name,
        next_stage=next_stage,
        manifest=manifest,
        usage=ctx.usage.to_dict(),
        move=RunMove(
            Run.Status.RUNNING,
            current_stage=next_stage or stage.name,
            ticket=ticket,
            queued_at=Now() if next_stage else None,
        ),
        release=not verdict,
        # The run's last stage ends it in the same write, unless its verdict comes between.
        then=Run.Status.SUCCEEDED if not (next_stage or verdict) else None,
        artifacts=stored if riding else (),
    )
    if next_stage:
        # Outside a transaction the write has committed, and on_commit runs this now.
        transaction.on_commit(lambda: enqueuing.dispatch(run.pk, next_stage, ticket))
    elif verdict:
        _verdict(ctx)
        append(writer, Succeeded(), move=RunMove(Run.Status.SUCCEEDED), release=True)
    leases.released_on_commit(ctx.held)


def _verdict(ctx: StageContext) -> None:
    """The end of resumed work that kept to its plan call by call: what it used, summed over
    its verified stages, must also be what the plan priced."""
    used = contract.used_since(ctx.run, ctx.contract)
    shortfall = ctx.contract.shortfall(used)
    if shortfall:
        ctx.deviate(shortfall)
        return
    gates = None
    if ctx.contract.gates:
        # Gates count too: how many the resumed work asked, against how many the plan said
        # it would (a recorded answer is never asked again).
        gates = {
            "asked": contract.gates_asked_since(ctx.run, ctx.contract),
            "promised": sum(1 for a in ctx.contract.gates.values() if a == "ask"),
        }
    append(ctx.writer, PlanKept(**ctx.contract.verdict_payload(used), gates=gates))

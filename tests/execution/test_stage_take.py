"""A stage job takes the run's lease and reads the run in one statement (issue 28). On
PostgreSQL that statement's snapshot can predate a commit its take waited for; the job must
then decide from the run as it is after the take, never from the older read."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from runs import engine
from runs.events import Interrupted
from runs.execution.engine import Outcome
from runs.ledger import leases
from runs.ledger.append import RunMove, Writer, append
from runs.models import Checkpoint, Event, Lease, Run
from runs.pipeline import Pipeline, Stage, StageOutput
from tests.support.pipelines import registered
from tests.support.processes import wait_for
from tests.support.state import another_session_waits_on_a_lock


def _step(ctx) -> StageOutput:
    return StageOutput(outputs={"n": 1})


one_step = Pipeline(
    name="one-step",
    description="one stage, nothing else",
    tools=(),
    stages=(Stage("only", _step),),
)


def _first(ctx) -> StageOutput:
    return StageOutput(outputs={"n": 1})


def _second(ctx) -> StageOutput:
    # Read twice, as a stage that looks at its upstream in two places does.
    return StageOutput(
        outputs={
            "n": ctx.upstream("first").outputs["n"] + 1,
            "again": ctx.upstream("first").outputs["n"],
        }
    )


def _third(ctx) -> StageOutput:
    # The newest checkpoint is second's; first's is further back.
    return StageOutput(
        outputs={"sum": ctx.upstream("first").outputs["n"] + ctx.upstream("second").outputs["n"]}
    )


three_steps = Pipeline(
    name="three-steps",
    description="each stage reads what the stages before it verified",
    tools=(),
    stages=(Stage("first", _first), Stage("second", _second), Stage("third", _third)),
)


@pytest.fixture
def pipeline(transactional_db, settings):
    with registered(settings, "tests.execution.test_stage_take.one_step"):
        yield


@pytest.fixture
def three(transactional_db, settings):
    with registered(settings, "tests.execution.test_stage_take.three_steps"):
        yield


def _statements_of_stage(run: Run, stage: str) -> list[str]:
    run.refresh_from_db()
    seen: list[str] = []

    def record(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        assert engine.execute(run.pk, stage, run.ticket, holder="worker:test") == Outcome.VERIFIED
    return seen


def _checkpoint_reads(statements: list[str]) -> list[str]:
    """The statements that read a checkpoint on their own (not with the run)."""
    quote = connection.ops.quote_name
    checkpoints, runs = quote(Checkpoint._meta.db_table), quote(Run._meta.db_table)
    return [
        sql
        for sql in statements
        if sql.lstrip().upper().startswith("SELECT") and checkpoints in sql and runs not in sql
    ]


def test_a_stage_job_takes_the_lease_and_reads_the_run_it_starts(pipeline):
    run = engine.start_run("one-step", {}, actor="test", enqueue=False)
    assert engine.execute(run.pk, "only", run.ticket, holder="worker-a") == Outcome.VERIFIED
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    started = Event.objects.get(run=run, type=Event.Type.STARTED)
    assert (started.token, started.payload["worker"]) == (1, "worker-a")
    assert Lease.objects.get(run=run).holder == ""


def test_a_take_that_waited_for_an_interruption_starts_nothing(pipeline):
    if connection.vendor != "postgresql":
        pytest.skip("one statement's snapshot and a row lock's re-check are PostgreSQL's")
    run = engine.start_run("one-step", {}, actor="test", enqueue=False)
    outcome: list[object] = []

    def stage_job() -> None:
        try:
            outcome.append(engine.execute(run.pk, "only", run.ticket, holder="worker-b"))
        except BaseException as exc:
            outcome.append(exc)
        finally:
            connections["default"].close()

    job = threading.Thread(target=stage_job)
    # An operator's interruption holds the lease row while it stops the run (its ticket
    # goes with it) and gives the lease back. The job's take starts meanwhile and waits for
    # that row: its statement's snapshot still shows the run with its ticket pending.
    with transaction.atomic():
        token = leases.acquire(run.pk, "operator", takeover=True)
        append(
            Writer(run.pk, token, "operator"),
            Interrupted(reason="stopped by an operator", last_seq=run.last_seq),
            move=RunMove(Run.Status.INTERRUPTED, ticket=""),
        )
        leases.release(run.pk, token)
        job.start()
        wait_for(another_session_waits_on_a_lock, timeout=30, what="the stage job's take to wait")
    job.join(timeout=60)
    assert outcome == [Outcome.NOTHING_TO_DO]
    run.refresh_from_db()
    assert run.status == Run.Status.INTERRUPTED
    assert not Event.objects.filter(run=run, type=Event.Type.STARTED).exists()
    # The job took the lease after the interruption (token 2) and gave it back.
    assert (Lease.objects.get(run=run).token, Lease.objects.get(run=run).holder) == (2, "")


def test_a_stage_reads_the_checkpoint_it_builds_on_with_the_take(three):
    run = engine.start_run("three-steps", {}, actor="test", enqueue=False)
    _statements_of_stage(run, "first")
    statements = _statements_of_stage(run, "second")
    # The take's read of the run (on SQLite the read after the take) brought first's
    # checkpoint; the stage read it twice and sent no statement of its own for it.
    assert _checkpoint_reads(statements) == []
    assert Checkpoint.objects.get(run=run, stage="second").outputs == {"n": 2, "again": 1}


def test_a_stage_reads_a_checkpoint_further_back_than_the_newest_itself(three):
    run = engine.start_run("three-steps", {}, actor="test", enqueue=False)
    _statements_of_stage(run, "first")
    _statements_of_stage(run, "second")
    statements = _statements_of_stage(run, "third")
    # second's came with the take; first's, further back, took a read of its own.
    assert len(_checkpoint_reads(statements)) == 1
    assert Checkpoint.objects.get(run=run, stage="third").outputs == {"sum": 3}
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED

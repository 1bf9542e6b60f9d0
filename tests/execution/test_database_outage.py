"""A stage whose database connection dies while it runs (issue 29): once the database answers
again the worker goes no further with the stage; the run is interrupted for a human, saying
why, and a worker whose committed writes were lost with a database crash says that too
(HeadLost) rather than build on a log missing them. A stage whose end committed, its answer
lost with the connection, is not interrupted: the run goes on to its next stage.

The connection is really killed (pg_terminate_backend on the stage's own backend), and the
loss of a write that did not wait for the disk is made the way a crash makes it: the event is
gone and the run's head is back where it was before it. Stages run in-process through
engine.execute on committed data (`transactional_db`)."""

from __future__ import annotations

import pytest
from django.db import connection

from runs import engine, enqueue
from runs.ledger.maintenance import maintenance
from runs.ledger.verify import verify_chain
from runs.models import Checkpoint, Event, ReplayPolicy, Run
from runs.pipeline import Pipeline, Stage, StageOutput, Tool
from tests.support.pipelines import registered

pytestmark = pytest.mark.postgres(
    reason="needs a server connection to kill (PostgreSQL); a SQLite connection is its process",
)


def _look(args: dict, key: str) -> dict:
    return {"external_id": f"look-{args['i']}"}


def lose_last_event(run_pk: int) -> None:
    """What a database crash does to an append that did not wait for the disk."""
    last, before = Event.objects.filter(run_id=run_pk).order_by("-seq")[:2]
    with maintenance(), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {Event._meta.db_table} WHERE id = %s", [last.pk])
        Run.objects.filter(pk=run_pk).update(last_seq=before.seq, head_hash=before.hash)


def kill_own_connection() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


def _connection_dies(ctx) -> StageOutput:
    ctx.call("look-0", "look", i=0)
    if ctx.run.inputs["lose"] == "yes":
        lose_last_event(ctx.run.pk)
    kill_own_connection()
    ctx.call("look-1", "look", i=1)
    return StageOutput(outputs={"done": "yes"})


outage = Pipeline(
    name="outage",
    inputs=(),
    tools=(Tool("look", ReplayPolicy.SAFE, _look),),
    stages=(Stage("calls", _connection_dies, tools=("look",)),),
)


@pytest.fixture
def pipeline(transactional_db, settings):
    with registered(settings, "tests.execution.test_database_outage.outage"):
        yield


def run_stage(lose: str) -> Run:
    run = engine.start_run("outage", {}, actor="test", enqueue=False)
    Run.objects.filter(pk=run.pk).update(inputs={"lose": lose})
    outcome = engine.execute(run.pk, "calls", run.ticket, holder="worker:test")
    assert outcome == engine.Outcome.INTERRUPTED
    run.refresh_from_db()
    return run


def interruption(run: Run) -> dict:
    return Event.objects.get(run=run, type=Event.Type.INTERRUPTED).payload


def test_a_stage_whose_connection_died_is_interrupted_and_goes_no_further(pipeline):
    run = run_stage(lose="no")
    assert run.status == Run.Status.INTERRUPTED
    assert interruption(run)["reason"] == "the database connection was lost while the stage ran"
    calls = Event.objects.filter(run=run, type=Event.Type.TOOL_CALLED)
    assert [e.payload["call"] for e in calls] == ["look-0"]
    assert verify_chain(run.pk).ok


def test_a_worker_whose_committed_write_was_lost_in_a_crash_stops_with_head_lost(pipeline):
    run = run_stage(lose="yes")
    assert run.status == Run.Status.INTERRUPTED
    reason = interruption(run)["reason"]
    assert "its last writes were lost" in reason
    # The lost TOOL_RESULT of look-0 stays lost: the worker wrote nothing after it.
    types = list(Event.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types == [
        Event.Type.RUN_CREATED,
        Event.Type.STARTED,
        Event.Type.TOOL_CALLED,
        Event.Type.INTERRUPTED,
    ]
    assert verify_chain(run.pk).ok


# --- a stage's end that committed, its answer lost with the connection ------------------------

ENDS: list[str] = []


def _first(ctx) -> StageOutput:
    return StageOutput(outputs={"n": 1})


def _second(ctx) -> StageOutput:
    return StageOutput(outputs={"n": ctx.upstream("first").outputs["n"] + 1})


two_stages = Pipeline(
    name="two-stages",
    inputs=(),
    tools=(),
    stages=(Stage("first", _first), Stage("second", _second)),
)


def _answer_lost_after_the_end(execute, sql, params, many, context):
    """Run the statement; if it was the stage's end (its checkpoint rides with it), the
    connection dies before its answer reaches the worker, as in a crash after the commit."""
    result = execute(sql, params, many, context)
    if "INSERT INTO " + connection.ops.quote_name(Checkpoint._meta.db_table) in sql:
        ENDS.append(sql)
        db = context["connection"]
        with db.wrap_database_errors, db.connection.cursor() as raw:
            raw.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    return result


@pytest.fixture
def two(transactional_db, settings):
    with registered(settings, "tests.execution.test_database_outage.two_stages"):
        ENDS.clear()
        yield


def test_a_stage_whose_end_committed_as_its_connection_died_goes_on_to_the_next(two):
    run = engine.start_run("two-stages", {}, actor="test", enqueue=False)
    with connection.execute_wrapper(_answer_lost_after_the_end):
        outcome = engine.execute(run.pk, "first", run.ticket, holder="worker:test")
    assert (outcome, len(ENDS)) == (engine.Outcome.VERIFIED, 1)
    run.refresh_from_db()
    # Verified, not interrupted: the next stage's job is queued under the ticket the end wrote.
    assert (run.status, run.current_stage) == (Run.Status.RUNNING, "second")
    assert not Event.objects.filter(run=run, type=Event.Type.INTERRUPTED).exists()
    assert enqueue.job_id(run.pk, run.ticket) in enqueue.queue().job_ids
    assert engine.execute(run.pk, "second", run.ticket, holder="worker:test") == (
        engine.Outcome.VERIFIED
    )
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert verify_chain(run.pk).ok


def test_a_last_stage_whose_end_committed_as_its_connection_died_leaves_the_run_succeeded(two):
    run = engine.start_run("two-stages", {}, actor="test", enqueue=False)
    assert engine.execute(run.pk, "first", run.ticket, holder="worker:test") == (
        engine.Outcome.VERIFIED
    )
    run.refresh_from_db()
    with connection.execute_wrapper(_answer_lost_after_the_end):
        outcome = engine.execute(run.pk, "second", run.ticket, holder="worker:test")
    assert (outcome, len(ENDS)) == (engine.Outcome.VERIFIED, 1)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert not Event.objects.filter(run=run, type=Event.Type.INTERRUPTED).exists()
    assert verify_chain(run.pk).ok

"""A worker keeps its database connection from one stage job to the next (issue 28), and never
one a job must not inherit. Jobs run in-process through runs.jobs.execute_stage, as the
worker calls them, on committed data (`transactional_db`)."""

from __future__ import annotations

import pytest
from django.db import connection, connections

from runs import engine, jobs
from runs.execution import outage
from runs.models import Lease, Run
from runs.pipeline import Pipeline, Stage, StageOutput
from tests.support.pipelines import registered


def _step(ctx) -> StageOutput:
    return StageOutput(outputs={"n": len(ctx.stage)})


two_steps = Pipeline(
    name="two-steps",
    description="two stages, nothing else",
    tools=(),
    stages=(Stage("first", _step), Stage("second", _step)),
)


@pytest.fixture
def pipeline(transactional_db, settings):
    with registered(settings, "tests.execution.test_worker_connection.two_steps"):
        yield


def _run_both_stages() -> tuple[Run, list[object]]:
    """Start a run and run its two stage jobs; the driver connection after each job."""
    run = engine.start_run("two-steps", {}, actor="test", enqueue=False)
    seen = []
    for stage in ("first", "second"):
        run.refresh_from_db()
        assert jobs.execute_stage(run.pk, stage, run.ticket) == "verified"
        seen.append(connection.connection)
    run.refresh_from_db()
    return run, seen


def test_a_stage_job_leaves_its_connection_open_for_the_next_job(pipeline):
    run, seen = _run_both_stages()
    assert run.status == Run.Status.SUCCEEDED
    assert seen[0] is not None
    assert seen[0] is seen[1]


def test_each_stage_job_gives_the_lease_back_once_its_stage_is_verified(pipeline):
    run, _ = _run_both_stages()
    lease = Lease.objects.get(run=run)
    # Two stage jobs took the lease (token 1, then 2); each checkpoint gave it back.
    assert (lease.token, lease.holder) == (2, "")


def test_a_connection_left_inside_a_transaction_is_closed_not_kept(pipeline):
    connection.ensure_connection()
    connection.set_autocommit(False)
    try:
        outage.keep_for_next_job()
        assert connection.connection is None
    finally:
        connection.set_autocommit(True)


def test_a_connection_that_saw_an_error_is_closed_not_kept(pipeline):
    connection.ensure_connection()
    connection.errors_occurred = True
    outage.keep_for_next_job()
    assert connection.connection is None


needs_server = pytest.mark.postgres(
    reason="needs a server connection to kill (PostgreSQL); a SQLite connection is its process",
)


def _terminate_this_connection_on_the_server() -> int:
    """End this thread's connection from the server's side, as a restart would; its pid.
    The call returns once the backend is gone, its notice sent."""
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
    finally:
        other.close()
    return pid


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


@needs_server
def test_a_kept_connection_the_server_dropped_is_replaced_before_the_next_job(pipeline):
    pid = _terminate_this_connection_on_the_server()
    assert outage.database_answers()
    assert _backend_pid() != pid


@needs_server
def test_a_quiet_kept_connection_takes_the_next_job_without_a_health_query(pipeline):
    pid = _backend_pid()
    ran = []
    with connection.execute_wrapper(lambda execute, sql, *args: ran.append(sql)):
        assert outage.ready_for_job()
    assert ran == []
    assert _backend_pid() == pid


@needs_server
def test_a_kept_connection_the_server_ended_is_noticed_without_running_a_job_on_it(pipeline):
    pid = _terminate_this_connection_on_the_server()
    ran = []
    with connection.execute_wrapper(
        lambda execute, sql, *args: ran.append(sql) or execute(sql, *args)
    ):
        assert outage.ready_for_job()
    # The ended connection was seen and asked (the query failed on it), then replaced and
    # asked again, before any job could use it.
    assert ran == ["SELECT 1", "SELECT 1"]
    assert _backend_pid() != pid


def test_on_sqlite_or_without_a_kept_connection_the_health_query_runs(pipeline):
    connection.close()
    ran = []
    with connection.execute_wrapper(
        lambda execute, sql, *args: ran.append(sql) or execute(sql, *args)
    ):
        assert outage.ready_for_job()
    assert ran == ["SELECT 1"]

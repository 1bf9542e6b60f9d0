"""A stage job takes the run's lease and reads the run in one statement (issue 28). On
PostgreSQL that statement's snapshot can predate a commit its take waited for; the job must
then decide from the run as it is after the take, never from the older read."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from runs import engine
from runs.execution.engine import Outcome
from runs.ledger import leases
from runs.ledger.append import Writer, append
from runs.models import Event, Lease, Run
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


@pytest.fixture
def pipeline(transactional_db, settings):
    with registered(settings, "tests.execution.test_stage_take.one_step"):
        yield


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
            Event.Type.INTERRUPTED,
            payload={"reason": "stopped by an operator"},
            status=Run.Status.INTERRUPTED,
            ticket="",
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

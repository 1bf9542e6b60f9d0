"""Crash detection: the sweeper turns a run whose worker or queued job is gone into
*interrupted*, with what is known, and leaves every other run alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db.models.functions import Now
from rq.job import Job
from rq.utils import utcformat

from runs import engine, enqueue
from runs.events import ToolCalled
from runs.execution import starting, sweeper
from runs.ledger import leases
from runs.ledger.append import LeaseLost, Writer, append
from runs.models import Event, Lease, Run
from tests.support.events import called
from tests.support.processes import wait_for
from tests.support.state import run_status


def start_content(*, enqueue: bool = False) -> Run:
    run = engine.start_run("content", {}, actor="test", enqueue=enqueue)
    run.refresh_from_db()
    return run


def begin_stage(run: Run, *, ttl: float) -> Writer:
    """What a worker does first: take the lease, consume the ticket, append STARTED."""
    held, read, newest = leases.hold_reading_run(run.pk, "worker:doomed", ttl=ttl)
    writer = Writer(run.pk, held.token, "worker:doomed")
    taken = starting.Taken(held, read, newest)
    assert starting.begin(writer, run.current_stage, run.ticket, taken) is not None
    return writer


def finish_in_process(run: Run) -> None:
    run.refresh_from_db()
    while run.is_active and run.ticket:
        engine.execute(run.pk, run.current_stage, run.ticket, holder="worker:test")
        run.refresh_from_db()


def test_a_run_whose_queued_job_was_lost_in_redis_becomes_interrupted(workers, redis_conn):
    run = start_content(enqueue=True)
    assert enqueue.job_id(run.pk, run.ticket) in enqueue.queue().job_ids
    redis_conn.flushdb()  # Redis restarted without persistence: the job is gone
    workers.start()
    wait_for(lambda: run_status(run) == Run.Status.INTERRUPTED, what="interrupted")

    interrupted = Event.objects.get(run=run, type=Event.Type.INTERRUPTED)
    assert interrupted.actor == sweeper.SWEEPER
    assert interrupted.payload["reason"] == "the queued stage job is gone from Redis"
    assert interrupted.payload["job_state"] == "missing"
    assert interrupted.stage == "research"
    assert not Event.objects.filter(run=run, type=Event.Type.STARTED).exists()
    assert Run.objects.get(pk=run.pk).ticket == ""


def test_a_queued_job_redis_still_has_is_left_alone(transactional_db, facts, redis_conn, settings):
    settings.RESUMER_QUEUE_GRACE = 0  # past the grace at once: only Redis' answer protects it
    run = start_content(enqueue=True)
    assert sweeper.sweep() == []
    assert run_status(run) == Run.Status.PENDING
    assert not Event.objects.filter(run=run, type=Event.Type.INTERRUPTED).exists()


def test_a_run_whose_worker_stopped_renewing_its_lease_becomes_interrupted(transactional_db, facts):
    # Committed and outside a transaction, so the database clock moves past the expiry.
    run = start_content()
    writer = begin_stage(run, ttl=0.3)
    wait_for(lambda: not leases.holds(run.pk, writer.token), timeout=30, what="lease expiry")

    assert sweeper.sweep() == [run.pk]
    assert run_status(run) == Run.Status.INTERRUPTED
    interrupted = Event.objects.get(run=run, type=Event.Type.INTERRUPTED)
    assert interrupted.payload["reason"] == "the worker stopped renewing its lease"
    assert interrupted.payload["holder"] == "worker:doomed"
    assert interrupted.payload["token"] == str(writer.token)
    assert interrupted.token > writer.token


def test_an_interruption_names_the_call_the_worker_was_making(transactional_db, facts):
    run = start_content()
    writer = begin_stage(run, ttl=0.3)
    append(
        writer, ToolCalled(stage="research", call="search", tool="search", policy="SAFE", args={})
    )
    wait_for(lambda: not leases.holds(run.pk, writer.token), timeout=30, what="lease expiry")

    assert sweeper.sweep() == [run.pk]
    interrupted = Event.objects.get(run=run, type=Event.Type.INTERRUPTED)
    assert (interrupted.payload["call"], interrupted.payload["tool"]) == ("search", "search")


def test_an_interruption_between_calls_names_no_call(transactional_db, facts):
    run = start_content()
    writer = begin_stage(run, ttl=0.3)
    wait_for(lambda: not leases.holds(run.pk, writer.token), timeout=30, what="lease expiry")

    assert sweeper.sweep() == [run.pk]
    interrupted = Event.objects.get(run=run, type=Event.Type.INTERRUPTED)
    assert "call" not in interrupted.payload


def test_a_worker_the_sweeper_fenced_out_cannot_append_when_it_wakes(transactional_db, facts):
    run = start_content()
    writer = begin_stage(run, ttl=0.3)
    wait_for(lambda: not leases.holds(run.pk, writer.token), timeout=30, what="lease expiry")
    sweeper.sweep()
    before = Event.objects.filter(run=run).count()
    with pytest.raises(LeaseLost):
        append(writer, called(1, "research"))
    assert Event.objects.filter(run=run).count() == before


def test_a_run_with_a_live_lease_is_left_alone(transactional_db, facts):
    run = start_content()
    begin_stage(run, ttl=600)
    assert sweeper.sweep() == []
    assert run_status(run) == Run.Status.RUNNING


def test_the_sweeper_never_touches_a_succeeded_run(transactional_db, facts, settings):
    settings.RESUMER_QUEUE_GRACE = 0
    run = start_content()
    finish_in_process(run)
    assert run_status(run) == Run.Status.SUCCEEDED
    # Its lease is released (expired), exactly what the sweeper looks for on active runs.
    assert not Lease.objects.get(run=run).holder
    lease_before = Lease.objects.values_list("token", "holder", "expires_at").get(run=run)
    events_before = Event.objects.filter(run=run).count()

    assert sweeper.sweep() == []
    assert run_status(run) == Run.Status.SUCCEEDED
    assert Event.objects.filter(run=run).count() == events_before
    assert Lease.objects.values_list("token", "holder", "expires_at").get(run=run) == lease_before


def test_interrupting_a_succeeded_run_directly_writes_nothing(transactional_db, facts):
    run = start_content()
    finish_in_process(run)
    events_before = Event.objects.filter(run=run).count()
    finding = sweeper.Finding(run.pk, "a stale report", {})
    assert sweeper.interrupt(finding, takeover=True) is False
    assert run_status(run) == Run.Status.SUCCEEDED
    assert Event.objects.filter(run=run).count() == events_before


def backdate_queued_at(run: Run, *, hours: float) -> None:
    Run.objects.filter(pk=run.pk).update(queued_at=Now() - timedelta(hours=hours))


def take_job(run: Run, *, ago: timedelta = timedelta(0)) -> Job:
    """What an RQ worker does when it dequeues the stage job: the job leaves the queue and
    is marked started, with the worker's clock, `ago` in the past."""
    queue = enqueue.queue()
    job = Job.fetch(enqueue.job_id(run.pk, run.ticket), connection=queue.connection)
    queue.remove(job)
    with queue.connection.pipeline() as pipe:
        job.prepare_for_execution("worker:test", pipe)
        pipe.execute()
    if ago:
        when = utcformat(datetime.now(UTC) - ago)
        queue.connection.hset(job.key, mapping={"started_at": when, "last_heartbeat": when})
    return job


def test_a_job_queued_long_ago_that_a_worker_just_took_is_left_alone(
    transactional_db, facts, redis_conn
):
    # After an outage hundreds of runs wait for a few workers: this one waited an hour in the
    # queue and a worker took it a moment ago. It is on its way, not lost.
    run = start_content(enqueue=True)
    backdate_queued_at(run, hours=1)
    take_job(run)
    token = Lease.objects.get(run=run).token
    assert Job.fetch(enqueue.job_id(run.pk, run.ticket), connection=redis_conn).get_status() == (
        "started"
    )

    assert sweeper.sweep() == []
    assert run_status(run) == Run.Status.PENDING
    assert Run.objects.get(pk=run.pk).ticket == run.ticket
    assert not Event.objects.filter(run=run, type=Event.Type.INTERRUPTED).exists()
    assert Lease.objects.get(run=run).token == token


def test_a_job_a_worker_took_longer_ago_than_the_lease_ttl_without_starting_is_lost(
    transactional_db, facts, redis_conn
):
    # The worker took the job, then died before it consumed the ticket: RQ still says started.
    run = start_content(enqueue=True)
    backdate_queued_at(run, hours=1)
    took = timedelta(seconds=leases.ttl_seconds() + float(settings.RESUMER_QUEUE_GRACE) + 60)
    take_job(run, ago=took)

    assert sweeper.sweep() == [run.pk]
    assert run_status(run) == Run.Status.INTERRUPTED
    interrupted = Event.objects.get(run=run, type=Event.Type.INTERRUPTED)
    assert interrupted.payload["job_state"] == "started"
    assert interrupted.payload["reason"] == (
        "RQ reports the stage job as started but it never started the stage"
    )
    assert "job_started_at" in interrupted.payload


def test_sweepers_reading_the_same_findings_interrupt_each_run_once_and_take_its_lease_once(
    transactional_db, facts, redis_conn, settings
):
    # After an outage every worker's sweeper reads the same findings in the same round: runs
    # whose worker died mid-stage and runs whose queued job Redis lost.
    settings.RESUMER_QUEUE_GRACE = 0
    expired = [start_content() for _ in range(2)]
    writers = [begin_stage(run, ttl=0.3) for run in expired]
    lost = [start_content(enqueue=True) for _ in range(2)]
    redis_conn.flushdb()
    wait_for(
        lambda: not any(leases.holds(w.run_id, w.token) for w in writers),
        timeout=30,
        what="lease expiry",
    )
    runs = [*expired, *lost]
    findings = sweeper.find_expired() + sweeper.find_lost_jobs()
    assert sorted(f.run_pk for f in findings) == sorted(run.pk for run in runs)
    tokens = dict(Lease.objects.filter(run__in=runs).values_list("run_id", "token"))

    first = [f.run_pk for f in findings if sweeper.interrupt(f)]
    second = [f.run_pk for f in findings if sweeper.interrupt(f)]

    assert sorted(first) == sorted(run.pk for run in runs)
    assert second == []
    for run in runs:
        assert run_status(run) == Run.Status.INTERRUPTED
        assert Event.objects.filter(run=run, type=Event.Type.INTERRUPTED).count() == 1
        # The second sweeper did not take the lease: one bump, the first sweeper's.
        assert Lease.objects.get(run=run).token == tokens[run.pk] + 1
        assert not Lease.objects.get(run=run).holder


def test_the_storys_interruption_is_written_by_a_second_workers_sweeper_fencing_the_dead_one(
    story_run,
):
    run = story_run
    interrupted = Event.objects.get(run=run, type=Event.Type.INTERRUPTED)
    dead = Event.objects.filter(run=run, type=Event.Type.STARTED).latest("seq")
    assert interrupted.actor == sweeper.SWEEPER
    assert interrupted.payload["reason"] == "the worker stopped renewing its lease"
    assert interrupted.payload["holder"] == dead.payload["worker"]
    assert interrupted.token > dead.token
    # Nothing after the dead worker's last write but the sweeper's event.
    assert interrupted.seq == run.last_seq
    assert Event.objects.filter(run=run, token=dead.token).latest("seq").seq < interrupted.seq

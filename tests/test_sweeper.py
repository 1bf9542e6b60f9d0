"""Crash detection: the sweeper turns a run whose worker or queued job is gone into
*interrupted*, with what is known, and leaves every other run alone."""

from __future__ import annotations

import pytest

from runs import engine, jobs, leases, sweeper
from runs.append import LeaseLost, Writer, append
from runs.models import Event, Lease, Run
from tests.support.processes import wait_for
from tests.support.state import run_status


def start_content(*, enqueue: bool = False) -> Run:
    run = engine.start_run("content", {}, actor="test", enqueue=enqueue)
    run.refresh_from_db()
    return run


def begin_stage(run: Run, *, ttl: float) -> Writer:
    """What a worker does first: take the lease, consume the ticket, append STARTED."""
    writer = Writer(run.pk, leases.acquire(run.pk, "worker:doomed", ttl=ttl), "worker:doomed")
    assert engine._begin(writer, run.current_stage, run.ticket) is not None
    return writer


def finish_in_process(run: Run) -> None:
    run.refresh_from_db()
    while run.is_active and run.ticket:
        engine.execute(run.pk, run.current_stage, run.ticket, holder="worker:test")
        run.refresh_from_db()


def test_a_run_whose_queued_job_was_lost_in_redis_becomes_interrupted(workers, redis_conn):
    run = start_content(enqueue=True)
    assert jobs.job_id(run.pk, run.ticket) in jobs.queue().job_ids
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
        writer,
        Event.Type.TOOL_CALLED,
        stage="research",
        payload={"call": "search", "tool": "search", "policy": "SAFE", "args": {}},
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
        append(writer, Event.Type.TOOL_CALLED, stage="research")
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

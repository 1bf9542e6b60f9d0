"""Races: two operators approving one plan at once, an approval against a sweeper that saw
the run before it, and a stage job delivered twice (RQ redelivery) or finding the lease held
for a moment. Real Redis, real worker processes, real threads on real connections."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from django.db import connection
from rq.job import Job, JobStatus

from demo import faults
from demo.simulators import publish_facts
from runs import engine, enqueue
from runs.execution import sweeper
from runs.ledger import leases
from runs.models import ApprovalMode, Event, Run
from runs.planning.planner import compute_plan
from runs.planning.resume import AlreadyApproved, ResumeRefused, StalePlan, approve
from tests.faults.matrix import Marks, once_problems
from tests.support.processes import Workers, wait_for
from tests.support.state import event_of, new_account, wait_settled

STRICT, UPGRADE = ApprovalMode.STRICT, ApprovalMode.UPGRADE

pytestmark = [pytest.mark.faults, pytest.mark.workers]


def crashed(workers: Workers, label: str, *, sweep: bool = True) -> Run:
    """A run whose worker was SIGKILLed uploading the cover. With `sweep`, a healthy worker
    is started and its sweeper interrupts the run; without, the run is left running on an
    expired lease for the test to sweep itself."""
    run = faults.start_run(
        "content",
        {"account": new_account(label)},
        actor="test:races",
        faults={"crash": "visual/upload-cover/before"},
    )
    doomed = workers.start("doomed")
    assert doomed.wait(timeout=120) == -signal.SIGKILL
    if sweep:
        workers.start("healthy")
        assert wait_settled(run.pk) == Run.Status.INTERRUPTED
    run.refresh_from_db()
    return run


def count(run: Run, type_: str) -> int:
    return Event.objects.filter(run=run, type=type_).count()


# --- Two operators approving the same plan at once -----------------------------------------


@pytest.mark.parametrize(
    "actions", [(STRICT, STRICT), (STRICT, UPGRADE)], ids=["strict+strict", "strict+upgrade"]
)
def test_two_operators_approving_one_plan_at_once_resume_it_once(actions, workers):
    marks = Marks.now()
    run = crashed(workers, "two-approvers")
    if UPGRADE in actions:
        publish_facts(run.inputs["topic"])  # facts v4 appears: the upgrade becomes possible
    plan = compute_plan(run)
    assert plan.can_strict and (UPGRADE not in actions or plan.can_upgrade)

    barrier = threading.Barrier(len(actions))
    outcomes: list[tuple[str, object]] = []

    def operator(action: str, name: str) -> None:
        try:
            barrier.wait()
            approval = approve(Run.objects.get(pk=run.pk), action, plan.fingerprint, actor=name)
            outcomes.append(("approved", approval))
        except ResumeRefused as exc:
            outcomes.append(("refused", exc))
        finally:
            connection.close()  # this thread's own connection

    threads = [
        threading.Thread(target=operator, args=(action, f"user:operator-{i}"))
        for i, action in enumerate(actions)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert sorted(kind for kind, _ in outcomes) == ["approved", "refused"]
    refusal = next(value for kind, value in outcomes if kind == "refused")
    # The same action on the same plan is the same decision; another action found it stale.
    assert isinstance(refusal, AlreadyApproved if actions == (STRICT, STRICT) else StalePlan)
    assert count(run, Event.Type.PLAN_APPROVED) == 1
    assert count(run, Event.Type.RESUMED) + count(run, Event.Type.BRANCHED) == 1
    approval = next(value for kind, value in outcomes if kind == "approved")
    resumed = approval.resumed
    assert Run.objects.filter(parent=run).count() == (1 if approval.branch else 0)
    assert wait_settled(resumed.pk) == Run.Status.SUCCEEDED
    if not approval.branch:
        assert once_problems(run, marks) == []


# --- An approval against a sweeper that saw the run before it -------------------------------


def _lost_job_run(workers: Workers, redis_conn) -> tuple[Run, sweeper.Finding]:
    run = engine.start_run("content", {"account": new_account("lost")}, actor="test:races")
    redis_conn.flushdb()  # the queued job is gone before any worker saw it
    finding = wait_for(
        lambda: next((f for f in sweeper.find_lost_jobs() if f.run_pk == run.pk), None),
        what="the lost job to be past its grace",
    )
    return run, finding


def _expired_lease_run(workers: Workers, redis_conn) -> tuple[Run, sweeper.Finding]:
    run = crashed(workers, "expired", sweep=False)
    finding = wait_for(
        lambda: next((f for f in sweeper.find_expired() if f.run_pk == run.pk), None),
        what="the dead worker's lease to run out",
    )
    return run, finding


@pytest.mark.parametrize(
    "make", [_expired_lease_run, _lost_job_run], ids=["lease-expired", "queued-job-lost"]
)
def test_an_approval_is_not_undone_by_a_sweeper_that_saw_the_run_before_it(
    make, workers, redis_conn
):
    marks = Marks.now()
    # No worker runs (so no other sweeper): this test is both sweepers. Two sweeper threads
    # (one per worker) read the same finding in the same round...
    run, finding = make(workers, redis_conn)
    # ...the first one marks the run interrupted...
    assert sweeper.interrupt(finding) is True
    run.refresh_from_db()
    # ...the operator approves the strict resume...
    approve(run, STRICT, compute_plan(run).fingerprint, actor="user:operator")
    run.refresh_from_db()
    approved = (run.status, run.ticket, run.version)
    # ...and then the second sweeper acts on what it read before all that.
    assert sweeper.interrupt(finding) is False

    run.refresh_from_db()
    assert (run.status, run.ticket, run.version) == approved
    assert count(run, Event.Type.INTERRUPTED) == 1
    workers.start("resumed")
    assert wait_settled(run.pk) == Run.Status.SUCCEEDED
    assert once_problems(run, marks) == []


# --- A stage job delivered twice -------------------------------------------------------------


def test_a_stage_job_delivered_to_two_workers_executes_each_effect_once(workers):
    marks = Marks.now()
    run = faults.start_run(
        "content",
        {"account": new_account("redelivery")},
        actor="test:races",
        faults={"stall": {"draft/generate": 1}},
    )
    first = workers.start("first")
    wait_for(
        lambda: event_of(run.pk, Event.Type.TOOL_CALLED, call="generate"), what="the draft call"
    )
    # Warm shutdown: draft finishes, the visual job is queued, the worker exits.
    os.kill(first.pid, signal.SIGTERM)
    first.wait(timeout=60)
    run.refresh_from_db()
    assert run.current_stage == "visual" and run.ticket

    # RQ delivers the visual job a second time (same job id, a second queue entry), and two
    # workers take one delivery each.
    enqueue.enqueue_stage(run.pk, "visual", run.ticket)
    assert enqueue.queue().count == 2
    workers.start("a")
    workers.start("b")
    assert wait_settled(run.pk) == Run.Status.SUCCEEDED
    assert once_problems(run, marks) == []
    assert count(run, Event.Type.STARTED) == 5
    assert count(run, Event.Type.INTERRUPTED) == 0


def test_a_stage_job_finding_the_lease_held_for_a_moment_still_runs_its_stage(workers):
    marks = Marks.now()
    run = engine.start_run(
        "content", {"account": new_account("busy")}, actor="test:races", enqueue=False
    )
    # Someone holds the lease for a moment while the ticket is pending: the previous
    # stage's worker between its commit and its release, a duplicate delivery finding
    # nothing to do, a sweeper checking the run. The job that owns the ticket arrives now.
    token = leases.acquire(run.pk, "test:a duplicate delivery")
    enqueue.enqueue_stage(run.pk, run.current_stage, run.ticket)
    job = Job.fetch(enqueue.job_id(run.pk, run.ticket), connection=enqueue.queue().connection)
    workers.start()
    wait_for(
        lambda: (
            job.get_status(refresh=True)
            in (JobStatus.STARTED, JobStatus.FINISHED, JobStatus.FAILED)
        ),
        what="a worker to pick the job up",
    )
    leases.release(run.pk, token)

    assert wait_settled(run.pk) == Run.Status.SUCCEEDED
    assert count(run, Event.Type.INTERRUPTED) == 0
    assert once_problems(run, marks) == []

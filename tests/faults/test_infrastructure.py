"""Infrastructure faults: Redis lost, a database connection dropped mid-append, warm and cold
worker shutdowns, a zombie worker, a call that times out, a job past its RQ timeout, and RQ
calling a finished job abandoned. Real Redis, real worker processes, assertions on the
database (and, where the fault is RQ's own bookkeeping, on RQ's)."""

from __future__ import annotations

import os
import signal
import time
from urllib.parse import quote

import pytest
from django.db import connection
from rq.job import Job, JobStatus

from demo import faults
from runs import enqueue
from runs.execution import sweeper
from runs.models import ApprovalMode, Checkpoint, Effect, Event, Lease, Run
from runs.planning.planner import Action, compute_plan
from runs.planning.resume import ResumeRefused, approve
from tests.faults import matrix
from tests.faults.matrix import Marks, once_problems
from tests.support.processes import PrivateRedis, wait_for
from tests.support.state import event_of, new_account, wait_settled

pytestmark = [pytest.mark.faults, pytest.mark.workers]


def start(label: str, **options) -> Run:
    return faults.start_run(
        "content", {"account": new_account(label)}, actor="test:faults", faults=options
    )


def called(run: Run, call: str) -> bool:
    """The call's TOOL_CALLED is committed: the worker is now past its intent."""
    return event_of(run.pk, Event.Type.TOOL_CALLED, call=call) is not None


def approve_fresh_plan(run: Run) -> None:
    """What an operator does: read the plan (a supervisor resolves a blocked charge first)
    and approve a strict resume."""
    run.refresh_from_db()
    plan = compute_plan(run)
    if plan.blockers:
        matrix.resolve_never_effects(plan)
        run.refresh_from_db()
        plan = compute_plan(run)
    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")


def verified_stages(run: Run) -> list[str]:
    return list(
        Event.objects.filter(run=run, type=Event.Type.VERIFIED)
        .order_by("seq")
        .values_list("stage", flat=True)
    )


# --- Redis restarted or flushed ------------------------------------------------------------


def lose_redis(server: PrivateRedis, how: str) -> None:
    if how == "flush":
        server.flush()
    else:
        server.restart()  # no persistence: it comes back empty


@pytest.mark.parametrize("how", ["flush", "restart"])
def test_a_queued_stage_job_lost_with_redis_interrupts_the_run_and_resume_loses_nothing(
    how, private_workers, private_redis
):
    marks = Marks.now()
    run = start("redis-queued", stall={"visual/upload-cover": 2})
    first = private_workers.start("first")
    wait_for(lambda: called(run, "upload-cover"), what="the cover upload's intent")
    # Warm shutdown: the worker finishes visual, queues prefill and exits; nobody takes it.
    os.kill(first.pid, signal.SIGTERM)
    first.wait(timeout=60)
    run.refresh_from_db()
    assert (run.current_stage, bool(run.ticket)) == ("prefill", True)
    marks_before_resume = Marks.now()

    lose_redis(private_redis, how)
    private_workers.start("after-redis-loss")
    assert wait_settled(run.pk) == Run.Status.INTERRUPTED
    plan = compute_plan(Run.objects.get(pk=run.pk))
    assert plan.next_stage == "prefill"
    assert plan.stages_skipped == ["research", "draft", "visual"]

    approve_fresh_plan(run)
    wait_settled(run.pk)
    assert once_problems(run, marks) == []
    # Nothing before prefill ran again after the loss.
    assert matrix.World.since(marks_before_resume).renders_billed == 0


@pytest.mark.parametrize("how", ["flush", "restart"])
def test_redis_lost_under_an_executing_stage_loses_nothing(how, private_workers, private_redis):
    marks = Marks.now()
    run = start("redis-started", stall={"visual/render-cover": 2})
    private_workers.start("first")
    wait_for(lambda: called(run, "render-cover"), what="the cover render's intent")

    lose_redis(private_redis, how)
    # RQ's worker may quit on the broken connection when the job ends; a supervisor (systemd,
    # Kubernetes) would start another, and so does this test.
    private_workers.start("replacement")
    if wait_settled(run.pk) == Run.Status.INTERRUPTED:
        approve_fresh_plan(run)  # the next stage's job was lost with Redis: resume it
        wait_settled(run.pk)
    assert once_problems(run, marks) == []


# --- The database connection dropped mid-append --------------------------------------------


def _pg_conninfo() -> str:
    conf = connection.settings_dict
    user = quote(conf.get("USER") or "")
    password = f":{quote(conf['PASSWORD'])}" if conf.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    host = conf.get("HOST") or "127.0.0.1"
    return f"postgresql://{auth}{host}:{conf.get('PORT') or 5432}/{conf['NAME']}"


@pytest.mark.parametrize(
    "table,event_type",
    [("runs_checkpoint", Event.Type.VERIFIED), ("runs_effect", Event.Type.TOOL_CALLED)],
    ids=["VERIFIED+checkpoint", "TOOL_CALLED+intent"],
)
def test_a_connection_dropped_mid_append_leaves_no_partial_write(table, event_type, workers):
    if connection.vendor != "postgresql":
        pytest.skip(
            "needs a server connection to kill mid-transaction (PostgreSQL); a SQLite "
            "connection is its process, whose death is the crash matrix's case"
        )
    import psycopg

    marks = Marks.now()
    run = start("db-drop")
    with (
        psycopg.connect(_pg_conninfo(), autocommit=False) as blocker,
        psycopg.connect(_pg_conninfo(), autocommit=True) as observer,
    ):
        # SHARE lets the worker read the table but makes its write wait: the worker sits
        # inside the append that writes the event and the row that goes with it (one
        # statement on PostgreSQL, which waits for the table's lock before writing either).
        # Then its connection is killed. The waiter is found by the lock it waits for, not
        # by its query's text, which pg_stat_activity cuts at 1 kB. (The observer is a
        # connection of its own: inside a transaction pg_stat_activity is a snapshot that
        # would never change.)
        blocker.execute(f"LOCK TABLE {table} IN SHARE MODE")
        workers.start("dropped")
        pid = wait_for(
            lambda: observer.execute(
                "SELECT pid FROM pg_locks WHERE NOT granted AND relation = %s::regclass",
                (table,),
            ).fetchone(),
            what=f"the worker to block inside its {table} append",
        )[0]
        observer.execute("SELECT pg_terminate_backend(%s)", (pid,))
        blocker.rollback()

    # Either the engine records the stage FAILED on a fresh connection (the error surfaced
    # inside the stage function), or, when it surfaced outside it, the lease runs out and a
    # sweeper interrupts the run. Both leave it resumable.
    assert wait_settled(run.pk) in Run.RESUMABLE
    assert matrix.chain_problems(run.pk) == []
    assert matrix.checkpoint_problems(run.pk) == []
    # The event that was inserted in the killed transaction is not there, and neither is
    # its companion row: every TOOL_CALLED of an effect has its intent row.
    for called_event in Event.objects.filter(run=run, type=Event.Type.TOOL_CALLED):
        key = called_event.idempotency_key
        assert not key or Effect.objects.filter(delivery_key=key).exists()
    if event_type == Event.Type.VERIFIED:
        assert verified_stages(run) == []
    else:
        assert Effect.objects.filter(run=run).count() == 0

    approve_fresh_plan(run)
    wait_settled(run.pk)
    assert once_problems(run, marks) == []


# --- Worker shutdowns ----------------------------------------------------------------------


def test_a_warm_shutdown_lets_the_executing_stage_finish(workers):
    marks = Marks.now()
    run = start("sigterm-warm", stall={"visual/render-cover": 2})
    worker = workers.start("warm")
    wait_for(lambda: called(run, "render-cover"), what="the cover render's intent")
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(timeout=60) == 0

    run.refresh_from_db()
    assert verified_stages(run) == ["research", "draft", "visual"]
    assert (run.status, run.current_stage, bool(run.ticket)) == ("running", "prefill", True)
    workers.start("next")
    wait_settled(run.pk)
    assert once_problems(run, marks) == []
    assert not Event.objects.filter(run=run, type=Event.Type.INTERRUPTED).exists()


def test_a_cold_shutdown_leaves_the_stage_cleanly_interrupted(workers):
    marks = Marks.now()
    run = start("sigterm-cold", stall={"visual/render-cover": 6})
    worker = workers.start("cold")
    wait_for(lambda: called(run, "render-cover"), what="the cover render's intent")
    os.kill(worker.pid, signal.SIGTERM)
    # RQ ignores a second signal within a second of the first (a pool may forward one);
    # this is spacing between two signals, not a timing assertion.
    time.sleep(1.2)
    os.kill(worker.pid, signal.SIGTERM)
    worker.wait(timeout=60)

    workers.start("sweeper")
    assert wait_settled(run.pk) == Run.Status.INTERRUPTED
    assert verified_stages(run) == ["research", "draft"]
    cover = Effect.objects.get(run=run, call_id="render-cover")
    assert cover.status == Effect.Status.INTENT
    assert matrix.chain_problems(run.pk) == []

    approve_fresh_plan(run)
    wait_settled(run.pk)
    assert once_problems(run, marks) == []


# --- A zombie worker -----------------------------------------------------------------------


@pytest.mark.parametrize("point", ["visual/render-cover", "publish/promote-charge"])
def test_a_zombie_worker_waking_after_takeover_has_every_write_refused(point, workers):
    stage, call = point.split("/")
    marks = Marks.now()
    run = start("zombie", stall={point: 4})
    zombie = workers.start("zombie", burst=True)
    wait_for(lambda: called(run, call), what=f"the {call} intent")
    # Frozen mid-stage (a GC pause, a suspended VM): no heartbeat, no writes, lease runs out.
    # Frozen right after a heartbeat committed, never halfway through one: a frozen renewal
    # would hold the lease row's lock (PostgreSQL) or the database's write lock (SQLite).
    beat = Lease.objects.values_list("heartbeat_at", flat=True).get(run=run)
    wait_for(
        lambda: Lease.objects.values_list("heartbeat_at", flat=True).get(run=run) != beat,
        what="a heartbeat during the stall",
    )
    os.kill(zombie.pid, signal.SIGSTOP)
    token = event_of(run.pk, Event.Type.STARTED, stage=stage).token

    workers.start("healthy")
    assert wait_settled(run.pk) == Run.Status.INTERRUPTED
    approve_fresh_plan(run)
    assert wait_settled(run.pk) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    head = run.last_seq

    os.kill(zombie.pid, signal.SIGCONT)
    zombie.wait(timeout=60)
    run.refresh_from_db()
    assert (run.status, run.last_seq) == (Run.Status.SUCCEEDED, head)
    interrupted = event_of(run.pk, Event.Type.INTERRUPTED).seq
    assert not Event.objects.filter(run=run, token=token, seq__gt=interrupted).exists()
    assert once_problems(run, marks) == []
    assert len(matrix.World.since(marks).charges) == 1


# --- An external call that times out -------------------------------------------------------


@pytest.mark.parametrize(
    "point,action",
    [
        ("visual/upload-cover", Action.RETRY_SAME_KEY),
        ("publish/publish", Action.RECORD_FOUND),
        ("publish/promote-charge", Action.BLOCKED),
    ],
    ids=["IDEMPOTENT", "RECONCILE_FIRST", "NEVER"],
)
def test_a_timed_out_call_is_recorded_unknown_and_never_guessed(point, action, workers):
    _, call = point.split("/")
    marks = Marks.now()
    run = start("timeout", timeout=f"{point}/after")
    workers.start()
    assert wait_settled(run.pk) == Run.Status.FAILED
    effect = Effect.objects.get(run=run, call_id=call)
    assert effect.status == Effect.Status.UNKNOWN

    run.refresh_from_db()
    plan = compute_plan(run)
    assert {e.call_id: e.action for e in plan.effects}[call] == action
    if action == Action.BLOCKED:
        with pytest.raises(ResumeRefused):
            approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    approve_fresh_plan(run)
    wait_settled(run.pk)
    assert once_problems(run, marks) == []


# --- A stage job past its RQ timeout -------------------------------------------------------


def test_a_stage_job_past_its_rq_timeout_keeps_the_last_checkpoint_and_the_stage_undone(
    workers, settings
):
    # Every stage job gets a 5 s RQ timeout: the first one queued here, the later ones queued
    # by the worker. The visual stage stalls far longer.
    settings.RQ_QUEUES = {
        name: {**config, "DEFAULT_TIMEOUT": 5} for name, config in settings.RQ_QUEUES.items()
    }
    workers.extra_env["RESUMER_JOB_TIMEOUT"] = "5"
    run = start("rq-timeout", stall={"visual/render-cover": 60})
    workers.start()
    status = wait_settled(run.pk)

    assert status in Run.RESUMABLE
    assert verified_stages(run) == ["research", "draft"]
    draft = Checkpoint.objects.get(run=run, stage="draft")
    plan = compute_plan(Run.objects.get(pk=run.pk))
    assert plan.checkpoint == draft.id and plan.next_stage == "visual"
    assert all(line.ok for line in plan.artifacts)
    assert matrix.chain_problems(run.pk) == []
    assert matrix.checkpoint_problems(run.pk) == []


# --- RQ calls a finished job abandoned -----------------------------------------------------


def test_rq_reporting_a_finished_job_abandoned_leaves_the_run_finished(workers):
    run = start("abandoned")
    workers.start()
    assert wait_settled(run.pk) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    head = (run.status, run.last_seq, run.version)

    queue = enqueue.queue()

    def finished_publish():
        # RQ moves the job to its finished registry just after the stage's commit.
        for job_id in queue.finished_job_registry.get_job_ids():
            found = Job.fetch(job_id, connection=queue.connection)
            if tuple(found.args[:2]) == (run.pk, "publish"):
                return found
        return None

    job = wait_for(finished_publish, what="RQ to record the publish job finished")
    # What a worker killed between the stage's commit and RQ's bookkeeping leaves behind: the
    # job still STARTED, its execution expired. RQ's own cleanup then calls it abandoned.
    job.set_status(JobStatus.STARTED)
    queue.connection.zadd(queue.started_job_registry.key, {f"{job.id}:lost": time.time() - 1})
    queue.started_job_registry.cleanup()
    assert job.get_status(refresh=True) == JobStatus.FAILED
    assert sweeper.sweep() == []

    # An operator requeues the failed job from the RQ admin, as one does with failed jobs.
    queue.failed_job_registry.requeue(job.id)
    wait_for(
        lambda: job.get_status(refresh=True) in (JobStatus.FINISHED, JobStatus.FAILED),
        what="the requeued job to run",
    )
    assert job.return_value(refresh=True) == "nothing-to-do"
    run.refresh_from_db()
    assert (run.status, run.last_seq, run.version) == head


# --- A worker dying while it retries a NEVER effect ----------------------------------------


def test_a_charge_retry_whose_worker_dies_blocks_the_plan_again(workers):
    marks = Marks.now()
    # Killed before the charge: a supervisor finds no charge and marks it failed, which lets
    # the resume call it once more. The retry stalls, and its worker is killed there too.
    run = start(
        "charge-retry",
        crash="publish/promote-charge/before",
        stall={"publish/promote-charge": 30},
    )
    assert workers.start("doomed").wait(timeout=120) == -signal.SIGKILL
    workers.start("sweeper")
    assert wait_settled(run.pk) == Run.Status.INTERRUPTED
    # The sweeper lets the lease go only after the stop's after-commit work (the stored plan);
    # killed before that, it would leave the lease held and the supervisor's edit refused.
    wait_for(lambda: Lease.objects.get(run=run).holder == "", what="the sweeper to release")
    workers.stop_all()  # the retry must run on a worker of its own, the one killed below
    approve_fresh_plan(run)  # resolves the charge as "not charged", then resumes
    retry = workers.start("retry")
    wait_for(
        lambda: (
            Event.objects.filter(
                run=run, type=Event.Type.TOOL_CALLED, payload__call="promote-charge"
            ).count()
            == 2
        ),
        what="the retried charge's intent",
    )
    retry.kill()
    retry.wait(timeout=30)
    workers.start("sweeper-2")
    assert wait_settled(run.pk) == Run.Status.INTERRUPTED

    # Whether the retry reached the card processor is unknown again: the ledger must say so,
    # and the plan must wait for a supervisor instead of calling a third time.
    run.refresh_from_db()
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    assert charge.status == Effect.Status.INTENT
    plan = compute_plan(run)
    assert {e.call_id: e.action for e in plan.effects}["promote-charge"] == Action.BLOCKED
    assert len(matrix.World.since(marks).charges) == 0

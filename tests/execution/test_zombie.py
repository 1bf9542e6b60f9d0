"""A zombie worker: frozen inside a tool call, fenced out by a takeover, woken afterwards.

Two real worker processes. The first is frozen (SIGSTOP) while it sleeps inside the stalled
cover render; its heartbeats stop, its lease runs out, the second worker's sweeper marks the
run interrupted, an operator approves a strict resume and the second worker carries on. Then
the first is woken (SIGCONT). It must write nothing to the ledger, and the images must still
be billed once each.
"""

from __future__ import annotations

import os
import signal

from rq.job import Job

from demo import faults
from runs import enqueue
from runs.ledger.verify import verify_chain
from runs.models import ApprovalMode, Event, Lease, Run
from runs.planning.planner import compute_plan
from runs.planning.resume import approve
from tests.support.processes import wait_for
from tests.support.state import run_status

# The stalled render's length: the zombie must be frozen inside it, after a heartbeat. A
# heartbeat is due every TTL/3; a busy machine can delay one by seconds, so the wait for it
# may take most of the stall (the resumed render stalls as long, once).
STALL_SECONDS = 8
HEARTBEAT_WAIT = STALL_SECONDS - 2


def freeze_between_heartbeats(pid: int, run: Run) -> None:
    """SIGSTOP right after a heartbeat committed. Freezing a process halfway through a
    renewal could leave its lease row locked (PostgreSQL) or the database's write lock held
    (SQLite) and stall everyone; just after one, the next is TTL/3 away."""
    seen = Lease.objects.values_list("heartbeat_at", flat=True).get(run=run)
    wait_for(
        lambda: Lease.objects.values_list("heartbeat_at", flat=True).get(run=run) != seen,
        timeout=HEARTBEAT_WAIT,
        what="a heartbeat while the render was stalled",
    )
    os.kill(pid, signal.SIGSTOP)


def test_a_frozen_worker_woken_after_a_takeover_writes_nothing_and_images_bill_once(
    workers, redis_conn, demo_service
):
    run = faults.start_run(
        "content", {}, actor="test", faults={"stall": {"visual/render-cover": STALL_SECONDS}}
    )
    zombie = workers.start("zombie")
    called = wait_for(
        lambda: Event.objects.filter(
            run=run, type=Event.Type.TOOL_CALLED, payload__call="render-cover"
        ).first(),
        timeout=120,
        what="the cover render to be called",
    )
    started = Event.objects.get(run=run, stage="visual", type=Event.Type.STARTED)
    assert started.payload["worker"].endswith(f":{zombie.pid}")
    zombie_token = called.token
    # The job the zombie is executing, to learn how it ends once woken.
    [job_id] = enqueue.queue().started_job_registry.get_job_ids()

    freeze_between_heartbeats(zombie.pid, run)
    written_before_wake = Event.objects.filter(run=run, token=zombie_token).count()

    workers.start("healthy")
    wait_for(lambda: run_status(run) == Run.Status.INTERRUPTED, timeout=120, what="interrupted")
    takeover = Event.objects.get(run=run, type=Event.Type.INTERRUPTED)
    assert takeover.token > zombie_token

    run.refresh_from_db()
    plan = compute_plan(run)
    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    os.kill(zombie.pid, signal.SIGCONT)

    wait_for(lambda: run_status(run) == Run.Status.SUCCEEDED, timeout=120, what="succeeded")
    job = wait_for(
        lambda: (j := Job.fetch(job_id, connection=redis_conn)).is_finished and j,
        timeout=120,
        what="the zombie's job to end",
    )

    # The zombie woke, found its token fenced and stopped: nothing with its token after the
    # takeover, and its job says so.
    assert job.return_value() == "lease-lost"
    assert Event.objects.filter(run=run, token=zombie_token).count() == written_before_wake
    assert not Event.objects.filter(run=run, token=zombie_token, seq__gt=takeover.seq).exists()
    assert zombie.poll() is None  # it lived on as a worker; only its write was refused
    # The outside world: three renders billed, one article.
    assert len(demo_service.renders()) == 3
    assert demo_service.count("render") == 3
    assert len(demo_service.articles()) == 1
    assert verify_chain(run.pk).ok

"""The database crash drill (issue 29): PostgreSQL crashes under a load of demo runs.

A private cluster (tests/support/postgres.py) on its own port, a private Redis, the demo
service and real `rqworker` processes; demo runs are started, then the cluster is crashed
(`pg_ctl stop -m immediate`: no checkpoint, WAL not yet written is gone) and started again,
a few times while they run. A watcher reads every event as it commits, so a write that was
committed without waiting for the disk and is gone after the crash is counted. Then the
drill plays the operator: every run that stopped gets its plan approved as a strict resume
(a blocked plan is left to a human), until nothing moves.

    .venv/bin/python -m tests.faults.database_crash      # prints its figures and a RESULT line

tests/faults/test_database_crash.py runs it (`make faults`) and asserts on what it found.
Run as a script so that Django is set up on the private cluster from the start.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

RUNS = 20
WORKERS = 4
CRASHES = 3
RESULT = "RESULT "


class Watcher(threading.Thread):
    """Reads every event row as it commits, on a connection of its own, until told to stop;
    it reconnects after a crash. What it saw is what other readers saw committed."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.seen: dict[int, str] = {}  # event id -> hash
        self.stopping = threading.Event()
        self.paused = threading.Event()

    def run(self) -> None:
        import psycopg

        top = 0
        while not self.stopping.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=2) as conn:
                    while not self.stopping.is_set():
                        rows = conn.execute(
                            "SELECT id, hash FROM runs_event WHERE id > %s", (top,)
                        ).fetchall()
                        for pk, digest in rows:
                            self.seen[pk] = digest
                            top = max(top, pk)
                        time.sleep(0.01)
            except Exception:
                time.sleep(0.1)

    def lost(self) -> int:
        """Events this watcher saw committed that are not in the log now (the same id with
        the same hash: an id may be handed out again after a crash)."""
        from runs.models import Event

        present = set(Event.objects.values_list("id", "hash"))
        return sum(1 for item in self.seen.items() if item not in present)


def stage_had_started(events: list) -> bool:
    """Whether the stage a stop interrupted had started: its STARTED is the last mark before
    the stop (after a VERIFIED, a RESUMED or RUN_CREATED the next stage was only queued)."""
    from runs.models import Event

    marks = {
        Event.Type.STARTED,
        Event.Type.VERIFIED,
        Event.Type.RUN_CREATED,
        Event.Type.RESUMED,
    }
    last = next((e for e in reversed(events) if e.type in marks), None)
    return last is not None and last.type == Event.Type.STARTED


def interrupted_before_start() -> list[str]:
    """Every stop (INTERRUPTED, or FAILED with no stage running) of a run whose stage had not
    started: what an outage must never cause."""
    from runs.models import Event

    found = []
    stops = Event.objects.filter(type=Event.Type.INTERRUPTED).order_by("run_id", "seq")
    for stop in stops:
        before = list(Event.objects.filter(run_id=stop.run_id, seq__lt=stop.seq).order_by("seq"))
        if not stage_had_started(before):
            found.append(f"run-{stop.run_id} #{stop.seq}: {stop.payload.get('reason')}")
    return found


def settled(timeout: float = 300) -> None:
    from runs.models import Run
    from tests.support.processes import wait_for

    wait_for(
        lambda: not Run.objects.filter(status__in=Run.ACTIVE).exists(),
        timeout=timeout,
        what="every run to stop or finish",
    )


def play_operator(rounds: int = 4) -> tuple[int, list[str]]:
    """Approve a strict resume of every stopped run whose plan is not blocked, with the plan's
    fingerprint, until none is left to approve. Returns the approvals and the refusals."""
    from runs.models import ApprovalMode, Run
    from runs.planning.planner import compute_plan
    from runs.planning.resume import ResumeRefused, approve

    approved, refused = 0, []
    for _ in range(rounds):
        acted = False
        for run in Run.objects.filter(status__in=Run.RESUMABLE).order_by("pk"):
            plan = compute_plan(run)
            if plan.blockers or not plan.resumable:
                continue
            try:
                approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:drill-operator")
            except ResumeRefused as exc:
                refused.append(f"{run.public_id}: {exc}")
                continue
            approved += 1
            acted = True
        if not acted:
            break
        settled()
    return approved, refused


def duplicates(marks) -> list[str]:
    """More than one article or charge for a run's account, or a render key billed twice."""
    from tests.faults import matrix

    world = matrix.World.since(marks)
    found = []
    for name, rows in (("articles", world.articles), ("charges", world.charges)):
        per_account = Counter(row.get("account") for row in rows)
        found += [f"{n} {name} for {acct}" for acct, n in per_account.items() if n > 1]
    billed = Counter(
        row["key"]
        for row in matrix.service().meter("render", after=marks.meter)
        if row["outcome"] == "billed"
        for _ in range(row["count"])
    )
    found += [f"render {key} billed {n} times" for key, n in billed.items() if n > 1]
    return found


def waiting_without_reason() -> list[str]:
    """Runs that wait for a human with no sentence saying why."""
    from runs.models import Event, Run
    from runs.reads.stops import sentence

    stops = (Event.Type.INTERRUPTED, Event.Type.FAILED, Event.Type.NEEDS_APPROVAL)
    found = []
    for run in Run.objects.filter(status__in=Run.RESUMABLE):
        stop = Event.objects.filter(run=run, type__in=stops).order_by("-seq").first()
        said = sentence(stop.type, stop.stage, stop.payload) if stop else ""
        if not said:
            found.append(run.public_id)
    return found


def drill(workdir: Path) -> dict:
    from demo import faults
    from demo.simulators import ensure_topic
    from runs.models import Event, Run
    from tests.faults import matrix
    from tests.support.processes import Workers
    from tests.support.state import new_account

    ensure_topic()
    marks = matrix.Marks.now()
    pool = Workers(workdir / "logs")
    cluster = CLUSTER
    watcher = Watcher(cluster.url())
    watcher.start()
    pks = [
        faults.start_run(
            "content",
            {"account": new_account(f"crash-{i}")},
            actor="test:drill",
            faults={"delay": 0.15},
        ).pk
        for i in range(RUNS)
    ]
    for _ in range(WORKERS):
        pool.start("drill")
    crashes = 0
    try:
        for _ in range(CRASHES):
            time.sleep(random.uniform(1.5, 3.0))  # the load, between crashes
            if not Run.objects.filter(pk__in=pks, status__in=Run.ACTIVE).exists():
                break
            cluster.crash()
            crashes += 1
            time.sleep(random.uniform(1.0, 3.0))  # the outage
            cluster.start()
            from django.db import connection

            connection.close()
            # A worker that died anyway is started again, as systemd would.
            for proc in list(pool.procs):
                if proc.poll() is not None:
                    pool.procs.remove(proc)
                    pool.start("restarted")
        settled()
        lost = watcher.lost()
        approved, refused = play_operator()
        settled()
    finally:
        watcher.stopping.set()
        pool.stop_all()
    runs = list(Run.objects.filter(pk__in=pks))
    started_before = interrupted_before_start()
    head_lost = Event.objects.filter(
        type=Event.Type.INTERRUPTED, payload__reason__icontains="its last writes were lost"
    ).count()
    interrupted = set(
        Event.objects.filter(type=Event.Type.INTERRUPTED).values_list("run_id", flat=True)
    )
    resumed = set(Event.objects.filter(type=Event.Type.RESUMED).values_list("run_id", flat=True))
    unresumed_successes = [
        r.public_id
        for r in runs
        if r.status == Run.Status.SUCCEEDED and r.pk in interrupted and r.pk not in resumed
    ]
    statuses = Counter(r.status for r in runs)
    return {
        "runs": RUNS,
        "crashes": crashes,
        "deferred_writes_lost": lost,
        "head_lost_stops": head_lost,
        "duplicates": duplicates(marks),
        "chain_problems": [p for pk in pks for p in matrix.chain_problems(pk)],
        "checkpoint_problems": [p for pk in pks for p in matrix.checkpoint_problems(pk)],
        "interrupted_before_start": started_before,
        "waiting_without_reason": waiting_without_reason(),
        "succeeded_without_strict_resume": unresumed_successes,
        "statuses": dict(statuses),
        "runs_interrupted": len(interrupted & set(pks)),
        "runs_resumed": len(resumed & set(pks)),
        "approved": approved,
        "refused": refused,
        "worker_logs": str(workdir / "logs"),
    }


CLUSTER = None


def main() -> None:
    global CLUSTER
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    from tests.support.postgres import PrivateCluster
    from tests.support.processes import PrivateRedis

    workdir = Path(tempfile.mkdtemp(prefix="resumer-drill-"))
    CLUSTER = PrivateCluster().init().start()
    redis = PrivateRedis(workdir / "redis").start()
    os.environ.update(
        DATABASE_URL=CLUSTER.url(),
        REDIS_URL=redis.url(),
        RESUMER_VAR_DIR=str(workdir),
        MEDIA_ROOT=str(workdir / "media"),
        DJANGO_SETTINGS_MODULE="resumer.settings",
        RESUMER_LOG_LEVEL=os.environ.get("RESUMER_LOG_LEVEL", "WARNING"),
    )
    for name, value in (
        ("RESUMER_LEASE_TTL", "4"),
        ("RESUMER_SWEEP_INTERVAL", "0.5"),
        ("RESUMER_QUEUE_GRACE", "2"),
        ("RESUMER_CHAIN_KEY", "test-only-chain-key-not-secret"),
    ):
        os.environ.setdefault(name, value)
    import django
    from django.conf import settings
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from demo_service.process import ServiceProcess

    service = ServiceProcess(database=workdir / "service.sqlite3", log=workdir / "service.log")
    service.start()
    settings.DEMO_SERVICE_URL = service.url
    keep = os.environ.get("RESUMER_DRILL_KEEP") == "1"
    try:
        result = drill(workdir)
    finally:
        service.stop()
        redis.stop()
        from django.db import connections

        connections.close_all()
        CLUSTER.remove()
        if not keep:
            shutil.rmtree(workdir / "media", ignore_errors=True)
    print(
        f"database crash drill: {result['crashes']} crashes under {RUNS} runs; deferred writes "
        f"lost {result['deferred_writes_lost']}, HeadLost stops {result['head_lost_stops']}, "
        f"duplicates {len(result['duplicates'])}, runs interrupted {result['runs_interrupted']}, "
        f"runs resumed {result['runs_resumed']}, statuses {result['statuses']}",
        flush=True,
    )
    print(RESULT + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

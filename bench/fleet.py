"""Scale-out, measured on PostgreSQL: runs per minute and p95 stage latency with 1, 2, 4 and 8
worker processes, then an outage drill (Redis stops for 20 s under load, the interrupted runs
are approved as groups, every run succeeds, no paid call is made twice).

    .venv/bin/python bench/fleet.py                          # 500 runs; 1, 2, 4, 8 workers; drill
    .venv/bin/python bench/fleet.py --runs 200 --workers 1,8 --outage 20
    .venv/bin/python bench/fleet.py --workers "" --outage 20  # the drill alone
    .venv/bin/python bench/fleet.py --runs 200 --workers 4 --against 5cf4dee  # CPU per run
                                                              # against an older commit's

The pipeline (bench/_fleet_pipeline.py) has three stages and five tool calls per run, each
waiting 50 ms like a remote API: I/O-bound work, registered through RESUMER_PIPELINES for the
bench and its workers as any user's pipeline is. Workers are real `manage.py rqworker
--worker-class runs.worker.ResumerWorker` processes on a redis-server of the bench's own (a
free port; the drill kills and restarts it), on a scratch PostgreSQL database per
configuration (`resumer_fleetbench` on BENCH_PG_URL's server, created and dropped).

Scale-out: all runs are created first (their first stage jobs wait in Redis), then K workers
start. Throughput counts the stages verified from the moment all K workers are registered
until the last run succeeds, as runs per minute (three stages = one run); the first-STARTED →
last-SUCCEEDED figure is printed beside it. Stage latency is STARTED → VERIFIED of each stage.
Timestamps are the database's own. CPU per run, over the same span: the worker processes'
(/proc/<pid>/stat) and the PostgreSQL server's (its live children plus the backends it has
reaped, when it runs on this machine). Cores × 60 s divided by that is the most runs per
minute this machine can do with any number of workers: the scale-out ceiling, printed last.

Drill: 8 workers (--drill-workers) under a supervisor that restarts a dead worker after 1 s
(systemd's Restart=always, RestartSec=1). Once a quarter of the runs succeeded, Redis is killed
(no persistence: it comes back empty, every queued job is lost) for --outage seconds and
started again. The bench then checks, from the settings the workers run with, that every
interrupted run was interrupted within max(lease TTL, queue grace) + sweep interval of the
first sweeper running after Redis came back (workers run with a deployment's timing: lease TTL
30 s, sweep interval 15 s, queue grace 10 s; FLEET_LEASE_TTL, FLEET_SWEEP_INTERVAL and
FLEET_QUEUE_GRACE change them), groups the stopped runs by plan shape
(runs/planning/triage.py), approves every group as the dashboard does for a large group (recorded by
triage.start_batch, carried out by a worker of the fleet), waits for every run to succeed and counts paid calls per delivery key at the target (bench/_fleet_pipeline.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

BENCH = Path(__file__).resolve().parent
# Created and dropped for each configuration; BENCH_PG_DATABASE names another (a shared
# server where each user has their own database name).
PG_DATABASE = os.environ.get("BENCH_PG_DATABASE", "resumer_fleetbench")
STAGES = ("gather", "compose", "post")
PAID_CALLS_PER_RUN = 2  # render, post


# --- child: one configuration on its own database and Redis ---------------------------------


class Fleet:
    """K worker processes; optionally supervised (a dead one is started again after 1 s)."""

    def __init__(self, log_dir: Path, supervise: bool = False) -> None:
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.supervise = supervise
        self.procs: list[subprocess.Popen] = []
        # When each process was started (time.monotonic()).
        self.spawned: dict[int, float] = {}
        self.started = 0
        self.restarts = 0
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def _spawn(self) -> subprocess.Popen:
        from runs.execution import worker

        self.started += 1
        log = open(self.log_dir / f"worker-{self.started:03d}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            worker.command(), cwd=_common.ROOT, env=dict(os.environ), stdout=log, stderr=log
        )
        log.close()
        self.spawned[proc.pid] = time.monotonic()
        return proc

    def survivors(self, since: float) -> int:
        """Processes started before `since` and alive now."""
        with self.lock:
            return sum(1 for p in self.procs if p.poll() is None and self.spawned[p.pid] < since)

    def start(self, count: int) -> None:
        with self.lock:
            self.procs = [self._spawn() for _ in range(count)]
        if self.supervise:
            self.thread = threading.Thread(target=self._watch, daemon=True)
            self.thread.start()

    def _watch(self) -> None:
        while not self.stopping.wait(1.0):
            with self.lock:
                for i, proc in enumerate(self.procs):
                    if proc.poll() is not None and not self.stopping.is_set():
                        self.procs[i] = self._spawn()
                        self.restarts += 1

    def alive(self) -> int:
        return sum(1 for p in self.procs if p.poll() is None)

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        with self.lock:
            for proc in self.procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)  # warm shutdown: finish the job
            for proc in self.procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, ...)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _postmaster() -> int | None:
    """The PostgreSQL server's main process, if it runs on this machine: the parent of this
    process's own backend."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    fields = _stat(backend)
    return int(fields[1]) if fields is not None else None


def _postgres_cpu(postmaster: int | None) -> float | None:
    """CPU seconds the whole PostgreSQL server has used: every backend that has exited (the
    postmaster reaped it, so its time is in the postmaster's cutime + cstime) plus every live
    child (backends, WAL writer, checkpointer, autovacuum). Workers close their connection
    after each job, so most backends live for one job: only the reaped children's total
    counts them. All the server's databases, this bench's own polling included."""
    if postmaster is None:
        return None
    main = _stat(postmaster)
    if main is None:
        return None
    ticks = int(main[13]) + int(main[14])
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(entry.name)
            if fields is not None and int(fields[1]) == postmaster:
                ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(values) - idle) / tick, sum(values) / tick


def _registered(connection) -> int:
    from rq import Worker

    try:
        return Worker.count(connection=connection)
    except Exception:  # Redis away
        return 0


def _wait(predicate, *, timeout: float, what: str, every: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def _status_counts() -> dict[str, int]:
    from django.db.models import Count

    from runs.models import Run

    return dict(Run.objects.values_list("status").annotate(n=Count("pk")).order_by())


def _create_runs(count: int) -> list[int]:
    from runs import engine

    return [engine.start_run("fleet", {}, actor="bench").pk for _ in range(count)]


def _percentile(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def _stage_latencies(run_pks: list[int] | None = None) -> list[float]:
    """STARTED → VERIFIED of every stage execution, in ms (the database's timestamps)."""
    from runs.models import Event

    events = Event.objects.filter(type__in=(Event.Type.STARTED, Event.Type.VERIFIED))
    if run_pks is not None:
        events = events.filter(run_id__in=run_pks)
    started: dict[tuple[int, str], datetime] = {}
    latencies = []
    for run_id, stage, type_, at in events.order_by("run_id", "seq").values_list(
        "run_id", "stage", "type", "created_at"
    ):
        if type_ == Event.Type.STARTED:
            started[(run_id, stage)] = at
        elif (run_id, stage) in started:
            latencies.append((at - started.pop((run_id, stage))).total_seconds() * 1000)
    return latencies


def _paid_calls(meter: Path) -> dict[str, int]:
    """What the target received: keys billed, and calls that repeated a key."""
    billed = sum(1 for p in meter.iterdir() if p.name != "repeats")
    repeats_file = meter / "repeats"
    repeats = len(repeats_file.read_text().splitlines()) if repeats_file.exists() else 0
    return {"billed_keys": billed, "repeats": repeats}


def _start_child(redis_dir: Path):
    """Before Django reads its settings: a private Redis on a free port is REDIS_URL."""
    sys.path.insert(0, str(_common.ROOT))
    from tests.support.processes import PrivateRedis, free_port

    port = free_port()
    os.environ["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
    _common.setup_django()
    return PrivateRedis(redis_dir, port=port).start()


def child_scale(workers: int, runs: int, var_dir: Path) -> None:
    redis = _start_child(var_dir / "redis")
    from django.db.models import Max, Min, Q
    from django.utils import timezone

    from runs.models import Event, Run

    try:
        created = time.monotonic()
        _create_runs(runs)
        created = time.monotonic() - created
        fleet = Fleet(var_dir / "logs")
        connection = redis.client()
        fleet.start(workers)
        _wait(lambda: _registered(connection) >= workers, timeout=120, what="workers up")
        ready = timezone.now()
        cpu_start = sum(_proc_cpu(p.pid) for p in fleet.procs)
        postmaster = _postmaster()
        pg_start = _postgres_cpu(postmaster)
        machine_start = _machine_cpu()
        _wait(
            lambda: (
                Run.objects.filter(status=Run.Status.SUCCEEDED).count() == runs
                or Run.objects.filter(status__in=Run.RESUMABLE).exists()
            ),
            timeout=3600,
            what="every run to finish",
            every=0.5,
        )
        worker_cpu = sum(_proc_cpu(p.pid) for p in fleet.procs) - cpu_start
        pg_end = _postgres_cpu(postmaster)
        machine_end = _machine_cpu()
        fleet.stop()
        counts = _status_counts()
        if counts.get(Run.Status.SUCCEEDED, 0) != runs:
            raise SystemExit(f"not every run succeeded: {counts}")
        span = Event.objects.aggregate(
            first=Min("created_at", filter=Q(type=Event.Type.STARTED)),
            last=Max("created_at", filter=Q(type=Event.Type.SUCCEEDED)),
        )
        overall_s = (span["last"] - span["first"]).total_seconds()
        steady_stages = Event.objects.filter(
            type=Event.Type.VERIFIED, created_at__gte=ready
        ).count()
        steady_s = (span["last"] - ready).total_seconds()
        latencies = _stage_latencies()
        meter = _paid_calls(Path(os.environ["FLEET_METER"]))
        _common.emit_result(
            {
                "workers": workers,
                "runs": runs,
                "create_s": created,
                "overall_rpm": runs / overall_s * 60,
                "steady_rpm": steady_stages / len(STAGES) / steady_s * 60,
                "steady_stages": steady_stages,
                "p50_ms": _percentile(latencies, 50),
                "p95_ms": _percentile(latencies, 95),
                "meter": meter,
                # Of the machine's CPU time from "all workers up" to the end: how busy it was
                # (everything: workers, PostgreSQL, Redis, and whatever else runs here), and
                # how much of it the workers used, per run.
                "machine_busy": (machine_end[0] - machine_start[0])
                / (machine_end[1] - machine_start[1]),
                "worker_cpu_share": worker_cpu / (machine_end[1] - machine_start[1]),
                "worker_cpu_ms_per_run": worker_cpu * 1000 * len(STAGES) / steady_stages,
                # None when the PostgreSQL server is not on this machine.
                "pg_cpu_ms_per_run": None
                if pg_start is None or pg_end is None
                else (pg_end - pg_start) * 1000 * len(STAGES) / steady_stages,
            }
        )
    finally:
        redis.stop()


def child_drill(workers: int, runs: int, outage: float, var_dir: Path) -> None:
    redis = _start_child(var_dir / "redis")
    from django.conf import settings
    from django.db.models import Max
    from django.utils import timezone

    from runs import enqueue, ids
    from runs.models import ApprovalMode, Effect, Event, GroupApproval, Run
    from runs.planning import triage

    ttl = float(settings.RESUMER_LEASE_TTL)
    interval = float(settings.RESUMER_SWEEP_INTERVAL)
    grace = float(settings.RESUMER_QUEUE_GRACE)
    bound = max(ttl, grace) + interval
    fleet = Fleet(var_dir / "logs", supervise=True)
    try:
        pks = _create_runs(runs)
        connection = redis.client()
        fleet.start(workers)
        _wait(lambda: _registered(connection) >= workers, timeout=120, what="workers up")
        _wait(
            lambda: Run.objects.filter(status=Run.Status.SUCCEEDED).count() >= runs // 4,
            timeout=3600,
            what="a quarter of the runs to succeed",
            every=0.2,
        )
        before = _status_counts()
        down_at = timezone.now()
        down_clock = time.monotonic()
        redis.kill()
        print(f"  Redis killed at {down_at:%H:%M:%S} with {before}", flush=True)
        time.sleep(outage)
        redis.start()
        back_at = timezone.now()
        during = _status_counts()
        print(f"  Redis back after {outage:.0f} s; runs then: {during}", flush=True)
        # The first sweeper after Redis came back: a worker that lived through the outage
        # (idle workers wait for Redis and keep sweeping), else the first one started again.
        survivors = fleet.survivors(down_clock)
        if not survivors:
            _wait(lambda: _registered(connection) >= 1, timeout=120, what="a worker registered")
        sweeper_at = back_at if survivors else timezone.now()

        def settled() -> bool:
            if Run.objects.filter(status__in=Run.ACTIVE).exists():
                return False
            return triage.groups().unplanned == 0

        _wait(settled, timeout=600, what="every affected run interrupted, its plan stored")
        settled_at = timezone.now()
        interrupted = list(
            Event.objects.filter(type=Event.Type.INTERRUPTED, created_at__gte=down_at)
            .values_list("run_id", "created_at", "payload")
            .order_by("created_at")
        )
        late = [
            (run_id, (at - sweeper_at).total_seconds())
            for run_id, at, _ in interrupted
            if (at - sweeper_at).total_seconds() > bound
        ]
        detection = [(at - back_at).total_seconds() for _, at, _ in interrupted]
        reasons: dict[str, int] = {}
        for _, _, payload in interrupted:
            reasons[payload.get("reason", "")] = reasons.get(payload.get("reason", ""), 0) + 1
        found = triage.groups()
        for group in found.groups:
            print(f"  group {group.fingerprint[:12]}: {group.sentence}", flush=True)

        approve_s = 0.0
        approved = skipped = 0
        # An operator approves every group from the dashboard: a group this large is recorded
        # and carried out by a worker of the fleet (triage.start_batch, jobs.approve_batch),
        # as the dashboard's POST does. A run skipped because its plan moved is in a group of
        # its fresh plan at the next reading (at most a few rounds).
        for _ in range(3):
            started = time.monotonic()
            for group in triage.groups().groups:
                if not group.approvable:
                    continue
                _, members = triage.group(group.fingerprint)
                row = triage.start_batch(
                    group.fingerprint,
                    [m.run_pk for m in members],
                    action=ApprovalMode.STRICT,
                    actor=ids.user_actor("bench-operator"),
                )
                enqueue.enqueue_batch(row.pk, row.total)
                _wait(
                    lambda row=row: GroupApproval.objects.get(pk=row.pk).finished,
                    timeout=600,
                    what=f"batch {row.pk} carried out by a worker",
                )
                row.refresh_from_db()
                print(f"    batch {row.pk[:12]}: {row.state}", flush=True)
                approved += len(row.approved)
                skipped += len(row.skipped)
                for s in row.skipped:
                    print(f"    skipped run-{s['run']}: {s['reason']}", flush=True)
            approve_s += time.monotonic() - started
            _wait(settled, timeout=3600, what="the approved runs to finish", every=0.5)
            if not Run.objects.filter(status__in=Run.RESUMABLE).exists():
                break
        fleet.stop()
        counts = _status_counts()
        meter = _paid_calls(Path(os.environ["FLEET_METER"]))
        effects = Effect.objects.filter(run_id__in=pks)
        paid_effects = effects.exclude(policy="SAFE")
        batches = set(
            Event.objects.filter(type=Event.Type.PLAN_APPROVED).values_list(
                "payload__batch", flat=True
            )
        )
        last_success = Event.objects.filter(type=Event.Type.SUCCEEDED).aggregate(
            m=Max("created_at")
        )["m"]
        _common.emit_result(
            {
                "workers": workers,
                "runs": runs,
                "outage_s": outage,
                "settings": {"ttl": ttl, "interval": interval, "grace": grace},
                "bound_s": bound,
                "before": before,
                "interrupted": len(interrupted),
                "reasons": reasons,
                "sweeper_after_back_s": (sweeper_at - back_at).total_seconds(),
                "detect_max_s": max(detection, default=0.0),
                "detect_p95_s": _percentile(detection, 95),
                "late": late,
                "settled_after_back_s": (settled_at - back_at).total_seconds(),
                "groups": [(g.count, g.sentence) for g in found.groups],
                "approved": approved,
                "skipped": skipped,
                "approve_s": approve_s,
                "batches": len([b for b in batches if b]),
                "worker_restarts": fleet.restarts,
                "succeeded": counts.get(Run.Status.SUCCEEDED, 0),
                "counts": counts,
                "meter": meter,
                "expected_paid": runs * PAID_CALLS_PER_RUN,
                "paid_effects": paid_effects.count(),
                "paid_confirmed": paid_effects.filter(status=Effect.Status.CONFIRMED).count(),
                "recovery_s": (last_success - back_at).total_seconds(),
            }
        )
    finally:
        fleet.stop()
        redis.stop()


# --- parent --------------------------------------------------------------------------------


def _env(url: str, var_dir: Path, bench: Path = BENCH) -> dict[str, str]:
    env = _common.child_env(url, var_dir)
    env.update(
        RESUMER_PIPELINES="_fleet_pipeline.fleet",
        RESUMER_CALL_HOOKS="",
        PYTHONPATH=os.pathsep.join(filter(None, [str(bench), env.get("PYTHONPATH", "")])),
        FLEET_METER=str(var_dir / "meter"),
        # Workers log a line per job at INFO; the bench reads the database, not the logs.
        RESUMER_LOG_LEVEL="WARNING",
        # A deployment's timing, not the tests' fast crash detection that `make bench` passes
        # on: every worker's sweeper polling twice a second is load no fleet would carry.
        RESUMER_LEASE_TTL=os.environ.get("FLEET_LEASE_TTL", "30"),
        RESUMER_SWEEP_INTERVAL=os.environ.get("FLEET_SWEEP_INTERVAL", "15"),
        RESUMER_QUEUE_GRACE=os.environ.get("FLEET_QUEUE_GRACE", "10"),
    )
    return env


def _run(args: list[str], prefix: str, root: Path = _common.ROOT) -> dict | None:
    """One configuration in a child, on `root`'s code (this checkout, or --against's)."""
    with _common.scratch_database("postgres", PG_DATABASE, prefix) as scratch:
        if scratch is None:
            return None
        url, var_dir = scratch
        return _common.run_child(
            root / "bench" / "fleet.py",
            [*args, "--var-dir", str(var_dir)],
            _env(url, var_dir, root / "bench"),
        )


def against(rev: str, runs: int, workers: int, rounds: int) -> None:
    """CPU per run of this checkout against commit `rev`'s, measured side by side: `rev` is
    checked out into a temporary git worktree (this checkout's virtualenv runs it), and the
    two take turns, --rounds times each, alternating which goes first."""
    tree = _common.scratch_dir("resumer-fleet-against-")
    subprocess.run(
        ["git", "-C", str(_common.ROOT), "worktree", "add", "--detach", str(tree), rev],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    sides = {"this checkout": _common.ROOT, rev: tree}
    per_run: dict[str, list[float]] = {side: [] for side in sides}
    try:
        for round_no in range(rounds):
            order = list(sides) if round_no % 2 == 0 else list(reversed(sides))
            for side in order:
                result = _run(
                    ["--child", "scale", "--count", str(workers), "--runs", str(runs)],
                    "resumer-fleetbench-",
                    sides[side],
                )
                if result is None:
                    return
                cpu = result["worker_cpu_ms_per_run"] + (result["pg_cpu_ms_per_run"] or 0)
                per_run[side].append(cpu)
                print(
                    f"  round {round_no + 1}, {side}: {result['worker_cpu_ms_per_run']:.0f} + "
                    f"{result['pg_cpu_ms_per_run'] or 0:.0f} = {cpu:.0f} ms per run "
                    f"(workers + PostgreSQL), {result['steady_rpm']:.0f} runs/min",
                    flush=True,
                )
    finally:
        subprocess.run(
            ["git", "-C", str(_common.ROOT), "worktree", "remove", "--force", str(tree)],
            check=False,
        )
    mean = {side: sum(v) / len(v) for side, v in per_run.items()}
    new, old = mean["this checkout"], mean[rev]
    print(
        f"\n  CPU per run, mean of {rounds} rounds: this checkout {new:.0f} ms, {rev} {old:.0f} ms;"
        f" this checkout / {rev} = {new / old:.2f} (the goal: 0.50 or less)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--workers", default="1,2,4,8", help='comma-separated; "" for none')
    parser.add_argument("--outage", type=float, default=20, help="seconds; 0 skips the drill")
    parser.add_argument("--drill-runs", type=int, help="runs in the drill (default: --runs)")
    parser.add_argument("--drill-workers", type=int, default=8)
    parser.add_argument(
        "--against",
        metavar="REV",
        help="CPU per run against commit REV's, side by side (the first of --workers)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="with --against: turns per side")
    parser.add_argument("--child", choices=("scale", "drill"), help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--var-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "scale":
        child_scale(args.count, args.runs, Path(args.var_dir))
        return
    if args.child == "drill":
        child_drill(args.count, args.runs, args.outage, Path(args.var_dir))
        return

    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    if args.against:
        print(
            f"fleet on PostgreSQL, this checkout against {args.against}: {args.runs} runs of 3 "
            f"stages / 5 tool calls waiting 50 ms each, {counts[0]} worker processes, "
            f"{args.rounds} rounds (load average {os.getloadavg()[0]:.1f})"
        )
        against(args.against, args.runs, counts[0], args.rounds)
        return
    print(
        f"fleet on PostgreSQL: {args.runs} runs of 3 stages / 5 tool calls waiting 50 ms each, "
        f"with {', '.join(map(str, counts)) or 'no'} worker processes (os.cpu_count()="
        f"{os.cpu_count()}, load average {os.getloadavg()[0]:.1f})"
    )
    results = []
    for count in counts:
        result = _run(
            ["--child", "scale", "--count", str(count), "--runs", str(args.runs)],
            "resumer-fleetbench-",
        )
        if result is None:
            return
        results.append(result)
        pg_ms = result["pg_cpu_ms_per_run"]
        print(
            f"  {count} worker(s): {result['steady_rpm']:.0f} runs/min steady "
            f"({result['overall_rpm']:.0f} first-start to last-success), stage latency p50 "
            f"{result['p50_ms']:.0f} ms, p95 {result['p95_ms']:.0f} ms; paid calls "
            f"{result['meter']['billed_keys']} billed, {result['meter']['repeats']} repeated; "
            f"machine CPU {result['machine_busy']:.0%} busy, workers "
            f"{result['worker_cpu_share']:.0%} of it; CPU per run: workers "
            f"{result['worker_cpu_ms_per_run']:.0f} ms, PostgreSQL "
            + (f"{pg_ms:.0f} ms" if pg_ms is not None else "n/a (not on this machine)"),
            flush=True,
        )
    if results:
        base = results[0]["steady_rpm"]
        print(
            "\n  workers   runs/min   x vs 1   p95 stage ms   machine CPU busy"
            "   CPU ms/run: workers + PostgreSQL"
        )
        for r in results:
            pg = r["pg_cpu_ms_per_run"]
            print(
                f"  {r['workers']:>7}   {r['steady_rpm']:>8.0f}   {r['steady_rpm'] / base:>6.2f}"
                f"   {r['p95_ms']:>12.0f}   {r['machine_busy']:>16.0%}"
                f"   {r['worker_cpu_ms_per_run']:>7.0f} + "
                + (f"{pg:.0f} = {r['worker_cpu_ms_per_run'] + pg:.0f}" if pg is not None else "n/a")
            )
        # The ceiling the CPU sets: however many workers, this machine's cores cannot do
        # more than cores x 60 s of CPU per minute, and each run costs the CPU measured above
        # (Redis and the bench itself left out, so the true ceiling is a little lower).
        last = results[-1]
        per_run = last["worker_cpu_ms_per_run"] + (last["pg_cpu_ms_per_run"] or 0)
        cores = os.cpu_count() or 1
        print(
            f"  CPU ceiling on this machine: {cores} cores x 60,000 ms / {per_run:.0f} ms per run "
            f"(workers + PostgreSQL, at {last['workers']} workers) = "
            f"~{cores * 60_000 / per_run:.0f} runs/min, whatever the number of workers"
        )
        by_count = {r["workers"]: r for r in results}
        if 1 in by_count and 8 in by_count:
            ratio = by_count[8]["steady_rpm"] / by_count[1]["steady_rpm"]
            print(f"  8 workers vs 1: {ratio:.2f}x (goal >= 6x)")

    if args.outage > 0:
        runs = args.drill_runs or args.runs
        print(
            f"\noutage drill: {runs} runs, {args.drill_workers} supervised workers, Redis down "
            f"for {args.outage:.0f} s"
        )
        d = _run(
            [
                "--child",
                "drill",
                "--count",
                str(args.drill_workers),
                "--runs",
                str(runs),
                "--outage",
                str(args.outage),
            ],
            "resumer-fleetdrill-",
        )
        if d is None:
            return
        s = d["settings"]
        print(
            f"  settings: lease TTL {s['ttl']:g} s, sweep interval {s['interval']:g} s, queue "
            f"grace {s['grace']:g} s -> bound max(TTL, grace) + interval = {d['bound_s']:g} s "
            f"after the first sweeper runs again"
        )
        print(
            f"  interrupted: {d['interrupted']} runs ({d['reasons']}); a sweeper ran again "
            f"{d['sweeper_after_back_s']:.1f} s after Redis came back; the last interruption "
            f"{d['detect_max_s']:.1f} s after it (p95 {d['detect_p95_s']:.1f} s); "
            f"later than the bound: {len(d['late'])}"
        )
        print(
            f"  groups: {len(d['groups'])}; approved {d['approved']} runs in "
            f"{d['approve_s']:.1f} s ({d['batches']} batches), skipped {d['skipped']}; "
            f"worker restarts {d['worker_restarts']}"
        )
        m = d["meter"]
        print(
            f"  every run succeeded: {d['succeeded'] == runs} ({d['counts']}), "
            f"{d['recovery_s']:.1f} s after Redis came back; paid calls: {m['billed_keys']} "
            f"billed for {d['expected_paid']} expected, {m['repeats']} repeated keys, "
            f"{d['paid_confirmed']}/{d['paid_effects']} paid effects confirmed"
        )
        ok = (
            d["succeeded"] == runs
            and not d["late"]
            and m["repeats"] == 0
            and m["billed_keys"] == d["expected_paid"]
        )
        print(f"  drill: {'PASSED' if ok else 'FAILED'}")


if __name__ == "__main__":
    main()

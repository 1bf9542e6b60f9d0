"""What a stage boundary costs, part by part, against a bare RQ job hop doing the same work.

    .venv/bin/python bench/stage_cost.py                    # SQLite and PostgreSQL
    .venv/bin/python bench/stage_cost.py --db postgresql --runs 50 --rounds 12

Both sides run bench/_boundary_pipeline.py: three stages with no tool calls (gather → compose,
which stores a small artifact → post), --runs runs, in one worker loop in this process with
real Redis, --rounds times, alternating sides so drift from outside load hits both:

  * boundary: engine.start_run("boundary"), worked off by Resumer's worker class
    (runs.worker.ResumerWorker, its sweeper thread included): take the lease, read the run,
    STARTED, the stage, VERIFIED + the checkpoint and its artifact row, the next job queued
    on commit, the lease released;
  * bare: the same three stages as plain RQ jobs on RQ's SimpleWorker, the outputs passed in
    the next job's arguments, the artifact's bytes stored in the same storage, no database.

Per stage it prints CPU (this process; and on PostgreSQL its server's, read from /proc as
bench/fleet.py does) and wall time, their ratio boundary / bare (the goal: at most 2), the
median of the rounds' own ratios (each round's two sides run one after the other, so a burst
of outside load on a shared machine moves one pair, not the whole figure), and,
from one more instrumented round per side (not timed for the ratios), where the wall time
goes: SQL statements, commits, artifact I/O, Redis round trips, and the rest (Python: Django,
RQ, the engine). Production settings (DEBUG off). Each database is a scratch one; Redis is
BENCH_REDIS_URL (default redis://127.0.0.1:6379/12), flushed before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

BENCH = Path(__file__).resolve().parent
PG_DATABASE = os.environ.get("BENCH_PG_DATABASE", "resumer_stagecost")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
PARTS = ("statements", "commits", "artifact I/O", "Redis round trips")


# --- instrumentation (the breakdown round only) ----------------------------------------------


class Meter:
    """Wall time and counts per part, from wrappers around the calls each part makes."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.count: Counter[str] = Counter()

    def timed(self, part: str, fn, *, count: bool = True):
        meter = self

        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                meter.seconds[part] += time.perf_counter() - started
                if count:
                    meter.count[part] += 1

        return wrapper


@contextmanager
def instrumented(meter: Meter):
    """Wrap what each part calls: Django's statement execution (every backend call goes
    through it once observed), the backend's commit, the storage's file calls, and redis-py's
    send of a command or a pipeline (one send, one round trip)."""
    import redis.connection
    from django.core.files.storage import default_storage
    from django.db import connection
    from django.db.backends.base.base import BaseDatabaseWrapper

    def statement(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            meter.seconds["statements"] += time.perf_counter() - started
            meter.count["statements"] += 1
            if context["connection"].get_autocommit():
                meter.count["commits"] += 1  # a statement in autocommit is its own commit

    patches = [
        (BaseDatabaseWrapper, "_commit", "commits"),
        (type(default_storage._wrapped), "save", "artifact I/O"),
        (type(default_storage._wrapped), "exists", "artifact I/O"),
        (type(default_storage._wrapped), "open", "artifact I/O"),
        (redis.connection.AbstractConnection, "send_packed_command", "Redis round trips"),
        (redis.connection.AbstractConnection, "read_response", "Redis round trips"),
    ]
    saved = []
    with ExitStack() as stack:
        stack.enter_context(connection.execute_wrapper(statement))
        for owner, name, part in patches:
            original = owner.__dict__.get(name, getattr(owner, name))
            saved.append((owner, name, original))
            # A round trip is counted once, at its send; the read's time is added to it.
            counted = not (part == "Redis round trips" and name == "read_response")
            setattr(owner, name, meter.timed(part, original, count=counted))
        try:
            yield
        finally:
            for owner, name, original in saved:
                setattr(owner, name, original)


# --- child: one database ---------------------------------------------------------------------


def _postgres_cpu() -> float:
    import fleet

    postmaster = fleet._postmaster()
    found = fleet._postgres_cpu(postmaster) if postmaster else None
    return found or 0.0


def _start(side: str, runs: int, round_no: int) -> None:
    from _boundary_pipeline import bare_stage  # noqa: F401  (importable by the worker)

    from runs import enqueue
    from runs.execution import engine

    if side == "boundary":
        for _ in range(runs):
            engine.start_run("boundary", {}, actor="bench")
        return
    for i in range(runs):
        enqueue.queue().enqueue(
            "_boundary_pipeline.bare_stage",
            f"r{round_no}-{i}",
            "gather",
            {},
            job_id=f"bare-r{round_no}-{i}-gather",
            result_ttl=3600,
            failure_ttl=24 * 3600,
        )


def _work(side: str) -> None:
    from rq import SimpleWorker

    from runs import enqueue
    from runs.worker import ResumerWorker

    queue = enqueue.queue()
    worker_class = ResumerWorker if side == "boundary" else SimpleWorker
    worker_class([queue], connection=queue.connection).work(burst=True, logging_level="WARNING")
    failed = queue.failed_job_registry.get_job_ids()
    if failed:
        raise SystemExit(f"{len(failed)} job(s) failed, e.g. {failed[0]}")


def _measure(side: str, runs: int, round_no: int, meter: Meter | None = None) -> dict:
    from django.db import connection

    _start(side, runs, round_no)
    on_pg = connection.vendor == "postgresql"
    pg_before = _postgres_cpu() if on_pg else 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    with instrumented(meter) if meter else ExitStack():
        _work(side)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    pg = (_postgres_cpu() - pg_before) if on_pg else 0.0
    stages = runs * 3
    return {
        "cpu_ms": cpu * 1000 / stages,
        "db_cpu_ms": pg * 1000 / stages,
        "wall_ms": wall * 1000 / stages,
        "parts": {
            part: (meter.seconds[part] * 1000 / stages, meter.count[part] / stages)
            for part in PARTS
        }
        if meter
        else {},
    }


def child(runs: int, rounds: int) -> None:
    _common.setup_django()
    from django.db import connection

    from runs import enqueue
    from runs.models import Run

    queue = enqueue.queue()
    queue.connection.flushdb()
    try:
        _measure("boundary", 20, 0)  # warm-up: imports, prepared statements, caches
        _measure("bare", 20, 0)
        timed: dict[str, list[dict]] = {"boundary": [], "bare": []}
        for round_no in range(1, rounds + 1):
            for side in ("boundary", "bare") if round_no % 2 else ("bare", "boundary"):
                timed[side].append(_measure(side, runs, round_no))
        broken = {side: _measure(side, runs, rounds + 1, Meter()) for side in timed}
        succeeded = Run.objects.filter(status=Run.Status.SUCCEEDED).count()
        if succeeded != Run.objects.count():
            raise SystemExit(f"only {succeeded} of {Run.objects.count()} runs succeeded")
    finally:
        queue.connection.flushdb()

    def mean(side: str, key: str) -> float:
        return sum(r[key] for r in timed[side]) / len(timed[side])

    _common.emit_result(
        {
            "vendor": connection.vendor,
            "sides": {
                side: {key: mean(side, key) for key in ("cpu_ms", "db_cpu_ms", "wall_ms")}
                for side in timed
            },
            # Each round's pair (the two sides one after the other): on a shared machine a
            # burst of outside load hits one pair, and the median pair ratio ignores it.
            "pair_cpu_ratios": [
                (b["cpu_ms"] + b["db_cpu_ms"]) / (r["cpu_ms"] + r["db_cpu_ms"])
                for b, r in zip(timed["boundary"], timed["bare"], strict=True)
            ],
            "parts": {side: broken[side]["parts"] for side in broken},
            "instrumented_wall_ms": {side: broken[side]["wall_ms"] for side in broken},
        }
    )


# --- parent --------------------------------------------------------------------------------


def _print(result: dict) -> None:
    sides, parts = result["sides"], result["parts"]
    b, r = sides["boundary"], sides["bare"]
    b_cpu, r_cpu = b["cpu_ms"] + b["db_cpu_ms"], r["cpu_ms"] + r["db_cpu_ms"]
    print(f"\n  {result['vendor']}: per stage          boundary      bare RQ hop    ratio")
    print(f"    CPU, worker                {b['cpu_ms']:>8.2f} ms   {r['cpu_ms']:>8.2f} ms")
    if b["db_cpu_ms"] or r["db_cpu_ms"]:
        print(
            f"    CPU, database server       {b['db_cpu_ms']:>8.2f} ms   {r['db_cpu_ms']:>8.2f} ms"
        )
    print(
        f"    CPU, all                   {b_cpu:>8.2f} ms   {r_cpu:>8.2f} ms   {b_cpu / r_cpu:>5.2f}x"
    )
    print(
        f"    wall                       {b['wall_ms']:>8.2f} ms   {r['wall_ms']:>8.2f} ms"
        f"   {b['wall_ms'] / r['wall_ms']:>5.2f}x"
    )
    pairs = sorted(result["pair_cpu_ratios"])
    print(
        f"    CPU ratio per round, median of {len(pairs)}: {statistics.median(pairs):.2f}x "
        f"(from {pairs[0]:.2f}x to {pairs[-1]:.2f}x)"
    )
    print("    where the wall time goes (an instrumented round; ms per stage, and how many):")
    for side in ("boundary", "bare"):
        total = result["instrumented_wall_ms"][side]
        accounted = sum(ms for ms, _ in parts[side].values())
        cells = [f"{part} {ms:.2f} ({n:.1f})" for part, (ms, n) in parts[side].items()]
        print(
            f"      {side:<9} {total:.2f} = "
            + " + ".join(cells)
            + f" + Python {total - accounted:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.runs, args.rounds)
        return
    print(
        f"stage boundary vs bare RQ hop: {args.runs} runs x 3 stages, {args.rounds} rounds per "
        f"side (os.cpu_count()={os.cpu_count()}, load average {os.getloadavg()[0]:.1f})"
    )
    for db in ("sqlite", "postgresql") if args.db == "both" else (args.db,):
        with _common.scratch_database(db, PG_DATABASE, "resumer-stagecost-") as scratch:
            if scratch is None:
                continue
            url, var_dir = scratch
            env = _common.child_env(url, var_dir)
            env.update(
                REDIS_URL=REDIS_URL,
                RESUMER_PIPELINES="_boundary_pipeline.boundary",
                RESUMER_CALL_HOOKS="",
                PYTHONPATH=os.pathsep.join(filter(None, [str(BENCH), env.get("PYTHONPATH", "")])),
                RESUMER_LOG_LEVEL="WARNING",
                # A deployment's timing: the worker's sweeper runs every 15 s, not twice a second.
                RESUMER_LEASE_TTL="30",
                RESUMER_SWEEP_INTERVAL="15",
                RESUMER_QUEUE_GRACE="10",
            )
            result = _common.run_child(
                Path(__file__),
                ["--child", "--runs", str(args.runs), "--rounds", str(args.rounds)],
                env,
            )
            _print(result)


if __name__ == "__main__":
    main()

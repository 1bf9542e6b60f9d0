"""Plan time against history length: a plan costs the tail, not the history.

    .venv/bin/python bench/plan_tail.py                    # SQLite and PostgreSQL
    .venv/bin/python bench/plan_tail.py --db sqlite        # one of them
    .venv/bin/python bench/plan_tail.py --events 100000 --repeat 31

For each database (a SQLite file in a temp folder with the settings' WAL/IMMEDIATE options; a
scratch PostgreSQL database `resumer_planbench` on BENCH_PG_URL's server, created and dropped
here) it builds two runs of the demo pipeline that stop at the same point (publish timed out,
so the plan also asks the platform about one effect):

  * short: 100 events in all;
  * long:  --events events in all (100,000 by default).

Both runs are real: the engine executes every stage in this process (the same code a worker
runs: lease, STARTED, effects, VERIFIED + checkpoint), so the last checkpoint (prefill) sits a
few events before the end of each log. The difference is filler history right after
RUN_CREATED. For speed the filler goes around the append path: it is bulk-INSERTed (the
append-only triggers refuse UPDATE and DELETE only) with its seq and hash chain computed by the
ledger's own event_hash, and the run's head (last_seq, head_hash, version) is moved past it,
so the stages that follow append onto a chain that verify_chain() accepts end to end.

Then compute_plan() runs on both, interleaved (long, short, long, ...) after a warm-up, and the
median of --repeat timings is compared. Goal: long / short < 2x. It also prints the number of
SQL queries one plan issues for each run and how many events the plan read.

Stage jobs are not queued anywhere: the child points REDIS_URL at a closed port, so the
engine's after-commit dispatch fails fast (and is logged below ERROR level, silenced here).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

PG_DATABASE = "resumer_planbench"
GOAL = 2.0
SHORT_EVENTS = 100
# The stop point both runs share: the publish call's outcome is unknown.
OPTIONS = {"timeout": "publish/publish/after"}
# A closed port: dispatch() logs and returns, no job reaches anybody's queue.
NO_REDIS = "redis://127.0.0.1:9/0"
FILLER_RESULT = "x" * 240  # a TOOL_RESULT of a few hundred bytes, like the real ones


# --- child: one database ---------------------------------------------------------------------


def add_filler(run, count: int, batch: int = 5000) -> None:
    """Append `count` chained events right after RUN_CREATED, bypassing append() for speed."""
    from django.db import transaction
    from django.db.models import F

    from runs.ledger.chain import event_hash, hashed_content
    from runs.models import Event, Run

    with transaction.atomic():
        head = Run.objects.select_for_update().get(pk=run.pk)
        seq, prev = head.last_seq, head.head_hash
        pending: list[Event] = []
        for i in range(count):
            seq += 1
            called = i % 2 == 0
            event = Event(
                run_id=run.pk,
                seq=seq,
                stage="research",
                type=Event.Type.TOOL_CALLED if called else Event.Type.TOOL_RESULT,
                inputs={},
                payload={"call": f"poll-{i // 2}", "tool": "search"}
                if called
                else {"call": f"poll-{i // 2}", "tool": "search", "result": FILLER_RESULT},
                payload_ref="",
                artifacts=[],
                idempotency_key="",
                actor="bench:filler",
                token=None,
                prev_hash=prev,
            )
            # The ledger's own hashing (what append() and verify_chain() use).
            event.hash = event_hash(prev, hashed_content(event))
            prev = event.hash
            pending.append(event)
            if len(pending) == batch:
                Event.objects.bulk_create(pending)
                pending = []
        if pending:
            Event.objects.bulk_create(pending)
        Run.objects.filter(pk=run.pk).update(
            last_seq=seq, head_hash=prev, version=F("version") + count
        )


def build(total_events: int, real_events: int):
    """A run stopped at OPTIONS whose log holds `total_events` events in all."""
    from demo import faults

    run = faults.start_run("content", {}, actor="bench", faults=OPTIONS, enqueue=False)
    # RUN_CREATED is already there; the stages will add `real_events - 1` more.
    add_filler(run, total_events - real_events)
    return _common.drive(run)


def count_real_events() -> int:
    from demo import faults

    probe = _common.drive(
        faults.start_run("content", {}, actor="bench", faults=OPTIONS, enqueue=False)
    )
    return probe.last_seq


def child(db: str, long_events: int, repeat: int) -> None:
    import os

    os.environ["REDIS_URL"] = NO_REDIS
    _common.setup_django()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from demo.simulators import ensure_topic
    from runs.ledger.verify import verify_chain
    from runs.models import Checkpoint, Run
    from runs.planning.planner import compute_plan

    ensure_topic()
    real = count_real_events()
    started = time.perf_counter()
    short = build(SHORT_EVENTS, real)
    long = build(long_events, real)
    built_in = time.perf_counter() - started
    chain = verify_chain(long.pk)
    assert chain.ok, chain.problems[:3]

    runs = {"short": short, "long": long}
    facts = {}
    for name, run in runs.items():
        run = Run.objects.get(pk=run.pk)
        assert run.status == Run.Status.FAILED, run.status
        plan = compute_plan(run)
        cp = Checkpoint.objects.get(pk=plan.checkpoint)
        with CaptureQueriesContext(connection) as queries:
            compute_plan(run)
        facts[name] = {
            "events": run.last_seq,
            "checkpoint_seq": cp.last_seq,
            "tail": plan.tail_events,
            "queries": len(queries.captured_queries),
            "event_queries": sum('"runs_event"' in q["sql"] for q in queries.captured_queries),
        }

    for _ in range(3):  # warm-up: caches, prepared plans, the OS page cache
        compute_plan(long)
        compute_plan(short)
    timings: dict[str, list[float]] = {"short": [], "long": []}
    for _ in range(repeat):
        for name in ("long", "short"):
            t0 = time.perf_counter()
            compute_plan(runs[name])
            timings[name].append(time.perf_counter() - t0)

    medians = {name: statistics.median(values) for name, values in timings.items()}
    ratio = medians["long"] / medians["short"]
    print(
        f"  {db}: built both runs in {built_in:.1f}s; long run's chain verifies ({chain.checked} events)"
    )
    for name in ("short", "long"):
        f = facts[name]
        print(
            f"  {db:<8} {name:<5} {f['events']:>7} events, checkpoint at seq {f['checkpoint_seq']:>7}, "
            f"tail {f['tail']:>2} read: plan median {medians[name] * 1000:7.2f} ms "
            f"(min {min(timings[name]) * 1000:.2f}), {f['queries']} SQL queries "
            f"({f['event_queries']} on runs_event)"
        )
    print(f"  {db:<8} ratio long/short: {ratio:.2f}x (goal < {GOAL}x)")
    _common.emit_result(
        {
            "db": db,
            "median_ms": {k: v * 1000 for k, v in medians.items()},
            "ratio": ratio,
            "queries": {k: v["queries"] for k, v in facts.items()},
            "events": {k: v["events"] for k, v in facts.items()},
        }
    )


# --- parent ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--events", type=int, default=100_000, help="events in the long run")
    parser.add_argument("--repeat", type=int, default=21, help="timed plans per run (median)")
    parser.add_argument("--child", choices=("sqlite", "postgres"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.events, args.repeat)
        return

    print(
        f"compute_plan() on a run of {SHORT_EVENTS} events vs one of {args.events} events, "
        f"last checkpoint near the end of both; median of {args.repeat}"
    )
    summary: list[dict] = []
    for db in ("sqlite", "postgres") if args.db == "both" else (args.db,):
        with _common.scratch_database(db, PG_DATABASE, "resumer-planbench-") as scratch:
            if scratch is None:
                continue
            url, var_dir = scratch
            with _common.demo_service(var_dir) as service_url:
                env = {**_common.child_env(url, var_dir), "DEMO_SERVICE_URL": service_url}
                summary.append(
                    _common.run_child(
                        Path(__file__),
                        ["--child", db, "--events", str(args.events), "--repeat", str(args.repeat)],
                        env,
                    )
                )

    worst = max((r["ratio"] for r in summary), default=0.0)
    parts = [
        f"{r['db']} {r['median_ms']['short']:.1f} ms vs {r['median_ms']['long']:.1f} ms "
        f"({r['ratio']:.2f}x; {r['queries']['short']}/{r['queries']['long']} queries)"
        for r in summary
    ]
    verdict = "meets" if worst < GOAL else "MISSES"
    print(f"SUMMARY: {'; '.join(parts)}; worst ratio {worst:.2f}x {verdict} the goal < {GOAL}x")
    if worst >= GOAL:
        sys.exit(1)


if __name__ == "__main__":
    main()

"""The engine's overhead: what the ledger adds per stage and per tool call, against the same
work done by bare RQ jobs.

    .venv/bin/python bench/engine_overhead.py                 # SQLite and PostgreSQL
    .venv/bin/python bench/engine_overhead.py --db sqlite --runs 10

Both sides run the demo pipeline's five stages for --runs runs with real Redis and a real
`manage.py rqworker --burst` process (the same ResumerWorker class), one job per stage, each
job queueing the next, --rounds times, alternating sides so drift from outside load hits both:

  * engine: engine.start_run("content") — lease, ticket, STARTED, effect intents and results,
    artifacts, VERIFIED + checkpoint, the next job queued after commit;
  * bare:   the same tool calls (search, generate_draft, 3x render, 3x upload, publish,
    charge: ten per run; the last eight over HTTP to the demo service, started here for each
    database) in plain RQ jobs that pass their data along in the job arguments, with no
    ledger at all.

Times are the jobs' own (RQ's started_at → ended_at), so worker start-up and queue waits are
not counted on either side. Per stage and per tool call, it prints the engine's time, the
bare time, the difference (the ledger's overhead) and the ratio.

Each database is a scratch one (a SQLite file in a temp folder; PostgreSQL database
`resumer_enginebench` on BENCH_PG_URL's server, created and dropped). Redis: BENCH_REDIS_URL
(default redis://127.0.0.1:6379/12), flushed before and after: point it at a database nothing
else uses.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

PG_DATABASE = "resumer_enginebench"
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
STAGES = ("research", "draft", "visual", "prefill", "publish")
CALLS_PER_STAGE = {"research": 1, "draft": 1, "visual": 6, "prefill": 0, "publish": 2}
TOPIC = "resumable-agents"


# --- the bare side: plain RQ jobs, the same simulator calls, no ledger --------------------------


def _key(run_key: str, *parts: str) -> str:
    # Unique per bench run like the engine's delivery keys, so every render and upload is a
    # real (billed) one on both sides, never a dedup hit.
    return hashlib.sha256("/".join((run_key, *parts)).encode()).hexdigest()


def bare_stage(run_key: str, stage: str, state: dict) -> str:
    """One stage of the demo pipeline as a naive RQ job would do it."""
    from django.db import close_old_connections, connections

    from demo.pipeline import IMAGE_SLOTS, PROMOTION_FEE, content_pipeline

    def call(tool: str, key: str, **args) -> dict:
        return content_pipeline.tool(tool).call(args, key)

    close_old_connections()
    try:
        following: tuple[str, dict] | None
        if stage == "research":
            following = ("draft", call("search", "", topic=TOPIC, version="v3"))
        elif stage == "draft":
            draft = call("generate_draft", "", topic=TOPIC, facts=state["facts"])
            following = ("visual", {"title": draft["title"], "body": draft["body"]})
        elif stage == "visual":
            assets = {}
            for slot in IMAGE_SLOTS:
                prompt = f"{slot}: {state['title']}"
                image = call("render_image", _key(run_key, "render", slot), prompt=prompt)
                asset = call(
                    "upload_asset", _key(run_key, "upload", slot), name=slot, svg=image["svg"]
                )
                assets[slot] = asset["url"]
            following = ("prefill", {**state, "assets": assets})
        elif stage == "prefill":
            form = {
                "title": state["title"],
                "cover_url": state["assets"]["cover"],
                "images": [state["assets"]["body-1"], state["assets"]["body-2"]],
            }
            following = ("publish", {**state, "form": form})
        else:
            article = call(
                "publish_article",
                _key(run_key, "publish"),
                account="acct-42",
                platform="devblog",
                title=state["title"],
                body=state["body"],
                cover_url=state["form"]["cover_url"],
            )
            call(
                "charge_card",
                _key(run_key, "charge"),
                account="acct-42",
                amount=str(PROMOTION_FEE),
                article=article["external_id"],
            )
            assert article["external_id"]
            following = None
        if following is not None:
            _enqueue_bare(run_key, *following)
        return "done"
    finally:
        connections.close_all()


def _enqueue_bare(run_key: str, stage: str, state: dict) -> None:
    import django_rq

    django_rq.get_queue("default").enqueue(
        "bench.engine_overhead.bare_stage",
        run_key,
        stage,
        state,
        job_id=f"bare-{run_key}-{stage}",
        result_ttl=3600,
    )


# --- child: one database -----------------------------------------------------------------------


def _burst_worker() -> None:
    """A real worker process, the same class as production's, until the queue is empty."""
    subprocess.run(
        [
            sys.executable,
            str(_common.ROOT / "manage.py"),
            "rqworker",
            "default",
            "--burst",
            "--worker-class",
            "runs.worker.ResumerWorker",
        ],
        cwd=_common.ROOT,
        env=dict(os.environ),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=1800,
    )


def _job_times(prefix: str) -> dict[str, list[float]]:
    """Seconds per finished job, by stage, for jobs whose id starts with `prefix`."""
    import django_rq
    from rq.job import Job

    queue = django_rq.get_queue("default")
    registry = queue.finished_job_registry
    failed = queue.failed_job_registry.get_job_ids()
    if failed:
        raise RuntimeError(f"{len(failed)} job(s) failed, e.g. {failed[0]}")
    ids = [i for i in registry.get_job_ids() if i.startswith(prefix)]
    times: dict[str, list[float]] = defaultdict(list)
    for job in Job.fetch_many(ids, connection=queue.connection):
        assert job is not None and job.started_at and job.ended_at
        times[job.args[1]].append((job.ended_at - job.started_at).total_seconds())
    return times


def child(db: str, runs: int, rounds: int) -> None:
    _common.setup_django()
    import django_rq

    from demo.simulators import ensure_topic
    from demo_service.process import ServiceClient
    from runs import engine
    from runs.ledger.verify import verify_chain
    from runs.models import Run

    ensure_topic()
    world = ServiceClient(os.environ["DEMO_SERVICE_URL"])
    redis = django_rq.get_connection("default")
    samples: dict[str, dict[str, list[float]]] = {"engine": defaultdict(list), "bare": {}}
    samples["bare"] = defaultdict(list)
    for round_no in range(rounds):
        for side in ("engine", "bare"):
            redis.flushdb()
            if side == "engine":
                started = [engine.start_run("content", {}, actor="bench").pk for _ in range(runs)]
                _burst_worker()
                done = Run.objects.filter(pk__in=started, status=Run.Status.SUCCEEDED).count()
                assert done == runs, f"{runs - done} engine run(s) did not succeed"
                assert all(verify_chain(pk).ok for pk in started)
                prefix = "run-"
            else:
                articles = len(world.articles())
                for n in range(runs):
                    _enqueue_bare(f"r{round_no}-{n}", "research", {})
                _burst_worker()
                assert len(world.articles()) == articles + runs, "bare runs did not finish"
                prefix = "bare-"
            for stage, seconds in _job_times(prefix).items():
                samples[side][stage].extend(seconds)
            assert all(len(samples[side][s]) == runs * (round_no + 1) for s in STAGES), side
    redis.flushdb()

    rows = {}
    for stage in STAGES:
        eng = statistics.median(samples["engine"][stage]) * 1000
        bare = statistics.median(samples["bare"][stage]) * 1000
        rows[stage] = {"engine_ms": eng, "bare_ms": bare}
    eng_run = sum(r["engine_ms"] for r in rows.values())
    bare_run = sum(r["bare_ms"] for r in rows.values())
    calls = sum(CALLS_PER_STAGE.values())
    print(f"  {db}: median job time per stage, {runs} runs x {rounds} rounds per side")
    print(
        f"    {'stage':<9} {'calls':>5} {'engine':>10} {'bare':>10} {'overhead':>10} {'ratio':>6}"
    )
    for stage, r in rows.items():
        print(
            f"    {stage:<9} {CALLS_PER_STAGE[stage]:>5} {r['engine_ms']:8.1f}ms "
            f"{r['bare_ms']:8.1f}ms {r['engine_ms'] - r['bare_ms']:8.1f}ms "
            f"{r['engine_ms'] / r['bare_ms']:5.2f}x"
        )
    # Per call: the overhead of the stages that make calls, minus what a call-less stage
    # (prefill: lease, STARTED, VERIFIED + checkpoint) costs anyway, spread over their calls.
    fixed = rows["prefill"]["engine_ms"] - rows["prefill"]["bare_ms"]
    with_calls = [s for s in STAGES if CALLS_PER_STAGE[s]]
    per_call = sum((rows[s]["engine_ms"] - rows[s]["bare_ms"]) - fixed for s in with_calls) / sum(
        CALLS_PER_STAGE[s] for s in with_calls
    )
    per_stage = (eng_run - bare_run) / len(STAGES)
    print(
        f"    per run: engine {eng_run:.1f} ms, bare {bare_run:.1f} ms, "
        f"ratio {eng_run / bare_run:.2f}x ({calls} tool calls, {len(STAGES)} stages)"
    )
    print(
        f"    ledger overhead: {per_stage:.1f} ms per stage on average; "
        f"{fixed:.1f} ms fixed per stage (lease, STARTED, VERIFIED + checkpoint) + "
        f"{per_call:.1f} ms per tool call (effect intent and result, two events)",
        flush=True,
    )
    _common.emit_result(
        {
            "db": db,
            "stages": rows,
            "per_run": {"engine_ms": eng_run, "bare_ms": bare_run},
            "ratio": eng_run / bare_run,
            "per_stage_ms": per_stage,
            "fixed_stage_ms": fixed,
            "per_call_ms": per_call,
        }
    )


# --- parent ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--runs", type=int, default=20, help="runs per side per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", choices=("sqlite", "postgres"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.runs, args.rounds)
        return

    print(
        f"engine vs bare RQ jobs: the demo pipeline, {args.runs} runs x {args.rounds} rounds "
        f"per side, one burst worker process per side and round (Redis {REDIS_URL})"
    )
    summary = []
    for db in ("sqlite", "postgres") if args.db == "both" else (args.db,):
        with _common.scratch_database(db, PG_DATABASE, "resumer-enginebench-") as scratch:
            if scratch is None:
                continue
            url, var_dir = scratch
            env = _common.child_env(url, var_dir)
            env["REDIS_URL"] = REDIS_URL
            with _common.demo_service(var_dir) as service_url:
                env["DEMO_SERVICE_URL"] = service_url
                summary.append(
                    _common.run_child(
                        Path(__file__),
                        ["--child", db, "--runs", str(args.runs), "--rounds", str(args.rounds)],
                        env,
                    )
                )
    print(
        "SUMMARY: "
        + "; ".join(
            f"{r['db']}: {r['per_run']['engine_ms']:.0f} ms vs {r['per_run']['bare_ms']:.0f} ms "
            f"per run ({r['ratio']:.2f}x), +{r['per_stage_ms']:.1f} ms per stage, "
            f"+{r['per_call_ms']:.1f} ms per tool call"
            for r in summary
        )
    )


if __name__ == "__main__":
    main()

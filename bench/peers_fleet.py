"""Side by side: CPU per run of the fleet pipeline on Resumer and on DBOS Transact, measured in
one run on this machine, both on PostgreSQL with K worker processes.

    .venv/bin/python bench/peers_fleet.py                        # 200 runs, 4 workers, 2 rounds
    .venv/bin/python bench/peers_fleet.py --runs 500 --workers 8 --rounds 3

What is compared: the same pipeline (three stages, five tool calls that each wait 50 ms, two of
them paid and billed once per key, one small JSON artifact) run to success N times by K worker
processes of each engine, on a scratch PostgreSQL database of its own, from the moment all K
workers are up until the last run succeeds. CPU per run = the worker processes' CPU
(/proc/<pid>/stat) + the PostgreSQL server's (its live children + the backends it reaped), over
that span, divided by the runs done in it; both sides are measured by bench/fleet.py's own
functions. Production settings on both sides: Resumer with DEBUG off and a deployment's sweep
timing (bench/fleet.py), DBOS at log level WARNING, no tracing.

Per stage, each side does:

- Resumer (bench/fleet.py's scale child, the pipeline of bench/_fleet_pipeline.py): one RQ job
  per stage on `manage.py rqworker --worker-class runs.worker.ResumerWorker` processes (one job
  at a time each); the stage's ticket and lease, an effect row per tool call (SAFE fetches;
  render IDEMPOTENT and post RECONCILE_FIRST, with their delivery keys), events, the artifact
  blob and row, the stage's outputs checked by its rules, and the next stage's job enqueued.
- DBOS (bench/_dbos_fleet.py, under PEERS_VENV): a run is a @DBOS.workflow enqueued on a DBOS
  queue; it enqueues a stage workflow per stage on a second queue (worker_concurrency=1: one
  stage at a time per process, like an RQ worker) and waits for its result; each tool call is a
  @DBOS.step whose output DBOS checkpoints; the artifact is a step's output; the stage checks
  the same rules. Queues and results are polled every --poll seconds (0.1; DBOS's default is 1).

The rounds alternate the order (Resumer first in odd rounds, DBOS first in even ones) so that a
drift of the machine's load falls on both sides. Only the ratio within one run means anything.

PEERS_VENV (default /tmp/resumer-peers-venv) is the venv with DBOS; it is created with
`pip install dbos==3.4.0 'psycopg[binary]==3.3.9'` (PEER_PACKAGES, the versions measured)
when missing. The scratch databases are BENCH_PG_DATABASE
(default `resumer_peersfleet`) and the same name + `_dbos`, on BENCH_PG_URL's server; both are
created and dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# Before bench/fleet.py reads it: a name of this bench's own, so that a bench/fleet.py run at
# the same time on the same server does not drop this one's database (or the other way round).
os.environ.setdefault("BENCH_PG_DATABASE", "resumer_peersfleet")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common
import fleet

BENCH = Path(__file__).resolve().parent
# Pinned: the versions the README's figures were measured with.
PEER_PACKAGES = ("dbos==3.4.0", "psycopg[binary]==3.3.9")
PEERS_VENV = Path(os.environ.get("PEERS_VENV", "/tmp/resumer-peers-venv"))


def _peers_python() -> Path:
    python = PEERS_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {PEERS_VENV} with dbos", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
        subprocess.run(
            [str(PEERS_VENV / "bin" / "pip"), "install", "-q", *PEER_PACKAGES],
            check=True,
        )
    return python


def resumer(runs: int, workers: int) -> dict:
    result = fleet._run(
        ["--child", "scale", "--count", str(workers), "--runs", str(runs)], "resumer-peersfleet-"
    )
    if result is None:
        raise SystemExit("PostgreSQL is not reachable")
    if result["meter"] != {"billed_keys": runs * fleet.PAID_CALLS_PER_RUN, "repeats": 0}:
        raise SystemExit(f"Resumer: paid calls {result['meter']}")
    return result


def dbos(runs: int, workers: int, poll: float, run_slots: int) -> dict:
    database = os.environ["BENCH_PG_DATABASE"] + "_dbos"
    command = [
        str(_peers_python()),
        str(BENCH / "_dbos_fleet.py"),
        *("--runs", str(runs), "--workers", str(workers), "--database", database),
        *("--poll", str(poll), "--run-slots", str(run_slots)),
    ]
    proc = subprocess.Popen(
        command,
        cwd=_common.ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        text=True,
    )
    result: dict = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(_common.RESULT_PREFIX):
            result = json.loads(line[len(_common.RESULT_PREFIX) :])
        else:
            print(line, end="", flush=True)
    if proc.wait() != 0 or not result:
        raise SystemExit(f"_dbos_fleet.py exited with {proc.returncode}")
    return result


def _total(r: dict) -> float:
    return r["worker_cpu_ms_per_run"] + (r["pg_cpu_ms_per_run"] or 0.0)


def _line(side: str, r: dict) -> str:
    pg = r["pg_cpu_ms_per_run"]
    return (
        f"  {side:<8} CPU per run {_total(r):6.0f} ms (workers {r['worker_cpu_ms_per_run']:.0f} "
        f"+ PostgreSQL {'n/a' if pg is None else f'{pg:.0f}'}); {r['steady_rpm']:.0f} runs/min; "
        f"stage p95 {r['p95_ms']:.0f} ms; paid calls {r['meter']['billed_keys']} billed, "
        f"{r['meter']['repeats']} repeated; machine {r['machine_busy']:.0%} busy"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--poll", type=float, default=0.1, help="DBOS's queue and result poll, s")
    parser.add_argument(
        "--run-slots", type=int, default=2, help="DBOS run workflows per worker process at once"
    )
    args = parser.parse_args()
    _peers_python()
    print(
        f"fleet side by side on PostgreSQL: {args.runs} runs of 3 stages / 5 tool calls waiting "
        f"50 ms each, {args.workers} worker processes per side, {args.rounds} rounds "
        f"(os.cpu_count()={os.cpu_count()}, load average {os.getloadavg()[0]:.1f})",
        flush=True,
    )
    sides = {
        "Resumer": lambda: resumer(args.runs, args.workers),
        "DBOS": lambda: dbos(args.runs, args.workers, args.poll, args.run_slots),
    }
    results: dict[str, list[dict]] = {"Resumer": [], "DBOS": []}
    for round_ in range(1, args.rounds + 1):
        order = ["Resumer", "DBOS"] if round_ % 2 else ["DBOS", "Resumer"]
        print(f"\nround {round_}: {' then '.join(order)}", flush=True)
        for side in order:
            print(f"  {side}: load average {os.getloadavg()[0]:.1f} before", flush=True)
            results[side].append(sides[side]())
            print(_line(side, results[side][-1]), flush=True)
        ratio = _total(results["Resumer"][-1]) / _total(results["DBOS"][-1])
        print(f"  round {round_}: Resumer / DBOS CPU per run = {ratio:.2f}", flush=True)

    print("\n  side      CPU ms/run: workers + PostgreSQL = total (mean of rounds)   runs/min")
    means = {}
    for side, rs in results.items():
        worker_ms = statistics.mean(r["worker_cpu_ms_per_run"] for r in rs)
        pg_ms = statistics.mean(r["pg_cpu_ms_per_run"] or 0.0 for r in rs)
        means[side] = worker_ms + pg_ms
        rpm = statistics.mean(r["steady_rpm"] for r in rs)
        print(
            f"  {side:<8}  {worker_ms:>7.0f} + {pg_ms:.0f} = {means[side]:.0f}"
            f"{'':>32}{rpm:>8.0f}   (rounds: {', '.join(f'{_total(r):.0f}' for r in rs)})"
        )
    ratio = means["Resumer"] / means["DBOS"]
    verdict = "at or below" if ratio <= 1 else "above"
    print(f"  Resumer / DBOS CPU per run: {ratio:.2f} (Resumer {verdict} DBOS, in this run)")


if __name__ == "__main__":
    main()

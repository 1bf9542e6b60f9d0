"""The fleet pipeline (bench/_fleet_pipeline.py) as DBOS Transact code, for bench/peers_fleet.py.

Runs under a venv that has DBOS (`pip install dbos 'psycopg[binary]'`, PEERS_VENV in
bench/peers_fleet.py), never under the project's: nothing here imports Django or Resumer. The
CPU counters are bench/fleet.py's own functions, so both sides are measured alike.

    $PEERS_VENV/bin/python bench/_dbos_fleet.py --runs 200 --workers 4

What a run is in DBOS terms (the same three stages and five tool calls as Resumer's `fleet`):

    fleet_run       a @DBOS.workflow, enqueued on the queue `fleet_runs` by the driver. It
                    enqueues one stage workflow per stage on the queue `fleet_stages` and waits
                    for its result (handle.get_result) before enqueuing the next: every stage
                    boundary is a queued hop, as Resumer's RQ job per stage is.
    gather_stage    fetch ×2 (@DBOS.step, 50 ms each)
    compose_stage   fetch (step), render (step; paid, billed once per key at the meter), the
                    small artifact (the JSON text) stored as the output of a step of its own,
                    `store_artifact`, so DBOS checkpoints it in its operation_outputs table
    post_stage      post (step; paid, billed once per key)

Each stage checks its outputs as the Resumer stage's rules do (6 items, rendered, posted).
Paid calls go to the same kind of meter as bench/_fleet_pipeline.py's: a file per delivery
key created with O_EXCL (FLEET_METER), a second call with a key is written down in `repeats`.
The key is the run's workflow ID and the call's name, hashed.

Concurrency (the DBOS side's choice, to match one RQ worker = one job at a time): every worker
process has a unique executor_id, and `fleet_stages` has worker_concurrency=1, so a process runs
one stage at a time. `fleet_runs` has worker_concurrency=--run-slots (default 2): a run
workflow only enqueues and waits, but it holds a thread and polls while its stage is queued or
running, so each process orchestrates at most that many runs at once; with 2 per process the
stage queue always has a stage waiting for each worker. Both queues poll every --poll seconds
(default 0.1; DBOS's default is 1.0, which would leave a worker idle up to a second after each
~100 ms stage, where an RQ worker blocks on Redis and takes the next job at once), and
get_result polls at the same interval.

Modes:

    (default) driver: drop and create the scratch database (`resumer_dbos_fleetbench` on
        BENCH_PG_URL's server, or --database), launch DBOS there (which creates its system
        tables), register both queues, enqueue --runs runs, shut its own DBOS down, start
        --workers worker processes, and from the moment all are up until the last run
        succeeds measure CPU: the workers' (/proc/<pid>/stat) and the PostgreSQL server's
        (live children + reaped backends). Then verify that every run succeeded with its post
        and that the meter billed each of the 2 × runs paid keys once, drop the database and
        print `RESULT {json}`.
    --worker I: launch DBOS with executor_id fleet-worker-I, execute queued work until SIGTERM.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common
import _target
from dbos import DBOS, DBOSConfig, SetWorkflowID
from fleet import _machine_cpu, _paid_calls, _percentile, _postgres_cpu, _proc_cpu, _stat

APP = "resumer-fleet-peer"
RUN_QUEUE = "fleet_runs"
STAGE_QUEUE = "fleet_stages"
STAGES = 3
PAID_CALLS_PER_RUN = 2  # render, post
POLL = float(os.environ.get("DBOS_FLEET_POLL", "0.1"))


# --- the pipeline ---------------------------------------------------------------------------


def _key(run_id: str, kind: str) -> str:
    return hashlib.sha256(f"fleet/{kind}/{run_id}/{kind}/1".encode()).hexdigest()


def _check(ok: bool, rule: str) -> None:
    if not ok:
        raise RuntimeError(f"rule failed: {rule}")


@DBOS.step()
def fetch(source: str) -> dict:
    time.sleep(_target.WAIT)
    return {"items": [f"{source}-{i}" for i in range(3)]}


@DBOS.step()
def render(key: str, text: str) -> dict:
    return {"external_id": _target.bill(key, "render"), "size": len(text)}


@DBOS.step()
def store_artifact(body: str) -> str:
    """The compose stage's artifact, kept as this step's checkpointed output."""
    return body


@DBOS.step()
def post(key: str, image: str) -> dict:
    return {"external_id": _target.bill(key, "post")}


@DBOS.workflow()
def gather_stage(run_id: str) -> dict:
    first = fetch("a")
    second = fetch("b")
    items = first["items"] + second["items"]
    _check(len(items) == 6, "items == 6")
    return {"items": items}


@DBOS.workflow()
def compose_stage(run_id: str, items: list[str]) -> dict:
    extra = fetch("c")
    text = " ".join(items + extra["items"])
    image = render(_key(run_id, "render"), text)
    store_artifact(json.dumps({"text": text}))
    _check(image["external_id"].startswith("render-"), "rendered")
    return {"image": image["external_id"], "digest": hashlib.sha256(text.encode()).hexdigest()}


@DBOS.workflow()
def post_stage(run_id: str, image: str) -> dict:
    posted = post(_key(run_id, "post"), image)
    _check(posted["external_id"].startswith("post-"), "posted")
    return {"post": posted["external_id"]}


def _stage(workflow, *args):
    """One stage as a queued hop: enqueue it on the stage queue, wait for its result."""
    handle = DBOS.enqueue_workflow(STAGE_QUEUE, workflow, *args)
    return handle.get_result(polling_interval_sec=POLL)


@DBOS.workflow()
def fleet_run() -> dict:
    run_id = DBOS.workflow_id
    assert run_id is not None
    gathered = _stage(gather_stage, run_id)
    composed = _stage(compose_stage, run_id, gathered["items"])
    return _stage(post_stage, run_id, composed["image"])


# --- processes ------------------------------------------------------------------------------


def _config(url: str, executor_id: str) -> DBOSConfig:
    return {
        "name": APP,
        "system_database_url": url,
        "executor_id": executor_id,
        # One version for the driver and every worker (else it is computed from the code).
        "application_version": "fleet-1",
        "log_level": "WARNING",
    }


def _dbos_url(database: str) -> str:
    url = _common.pg_url(database)
    return "postgresql://" + url.split("://", 1)[1]


def worker(index: int, url: str, ready: Path) -> None:
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    DBOS(config=_config(url, f"fleet-worker-{index}"))
    DBOS.launch()
    ready.touch()
    stopping.wait()
    DBOS.destroy()


def driver(args: argparse.Namespace) -> None:
    import psycopg

    global POLL
    POLL = args.poll
    var_dir = _common.scratch_dir("resumer-dbosfleet-")
    meter = var_dir / "meter"
    os.environ["FLEET_METER"] = str(meter)
    database = args.database
    _common.recreate_pg_database(database)
    url = _dbos_url(database)
    procs: list[subprocess.Popen] = []
    try:
        # Set up and enqueue from a DBOS that listens to no queue of ours, then shut it down:
        # the driver executes nothing and leaves no poller running during the measurement.
        DBOS(config=_config(url, "fleet-driver"))
        DBOS.listen_queues([])
        DBOS.launch()
        DBOS.register_queue(RUN_QUEUE, worker_concurrency=args.run_slots, polling_interval_sec=POLL)
        DBOS.register_queue(STAGE_QUEUE, worker_concurrency=1, polling_interval_sec=POLL)
        created = time.monotonic()
        for i in range(args.runs):
            with SetWorkflowID(f"run-{i + 1:05d}"):
                DBOS.enqueue_workflow(RUN_QUEUE, fleet_run)
        created = time.monotonic() - created
        DBOS.destroy()

        env = dict(os.environ, PYTHONUNBUFFERED="1", DBOS_FLEET_POLL=str(POLL))
        logs = var_dir / "logs"
        logs.mkdir()
        for i in range(1, args.workers + 1):
            with open(logs / f"worker-{i:03d}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            __file__,
                            "--worker",
                            str(i),
                            "--url",
                            url,
                            "--ready",
                            str(var_dir / f"ready-{i}"),
                        ],
                        env=env,
                        stdout=log,
                        stderr=log,
                    )
                )
        deadline = time.monotonic() + 120
        while not all((var_dir / f"ready-{i}").exists() for i in range(1, args.workers + 1)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit(f"workers did not come up; logs in {logs}")
            time.sleep(0.05)

        with psycopg.connect(_common.pg_url(database), autocommit=True) as conn:
            ready_ms = time.time() * 1000
            cpu_start = sum(_proc_cpu(p.pid) for p in procs)
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            fields = _stat(backend)
            postmaster = int(fields[1]) if fields is not None else None
            pg_start = _postgres_cpu(postmaster)
            machine_start = _machine_cpu()

            def counts() -> dict[str, int]:
                rows = conn.execute(
                    "SELECT status, count(*) FROM dbos.workflow_status WHERE queue_name = %s "
                    "GROUP BY status",
                    (RUN_QUEUE,),
                ).fetchall()
                return dict(rows)

            deadline = time.monotonic() + 3600
            while True:
                now = counts()
                if now.get("SUCCESS", 0) == args.runs or now.get("ERROR", 0):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"timed out waiting for every run: {now}")
                time.sleep(0.5)
            worker_cpu = sum(_proc_cpu(p.pid) for p in procs) - cpu_start
            pg_end = _postgres_cpu(postmaster)
            machine_end = _machine_cpu()

            if now.get("SUCCESS", 0) != args.runs:
                raise SystemExit(f"not every run succeeded: {now}")
            outputs = conn.execute(
                "SELECT coalesce(o.output, s.output), s.serialization FROM dbos.workflow_status s "
                "LEFT JOIN dbos.workflow_output o USING (workflow_uuid) WHERE s.queue_name = %s",
                (RUN_QUEUE,),
            ).fetchall()
            first_start, last_done = conn.execute(
                "SELECT min(started_at_epoch_ms), max(completed_at) FROM dbos.workflow_status "
                "WHERE queue_name = %s",
                (RUN_QUEUE,),
            ).fetchone()
            stages = conn.execute(
                "SELECT status, started_at_epoch_ms, completed_at FROM dbos.workflow_status "
                "WHERE queue_name = %s",
                (STAGE_QUEUE,),
            ).fetchall()
            artifacts = conn.execute(
                "SELECT count(*) FROM dbos.operation_outputs WHERE function_name LIKE %s",
                ("%store_artifact",),
            ).fetchone()[0]
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
        procs = []

        done = [s for s in stages if s[0] == "SUCCESS"]
        steady_stages = sum(1 for _, _, finished in done if finished >= ready_ms)
        steady_s = (last_done - ready_ms) / 1000
        latencies = [finished - started for _, started, finished in done]
        # Every run's result is its post: DBOS's default serializer is pickle in base64.
        posted = sum(
            1
            for output, serialization in outputs
            if serialization == "py_pickle"
            and pickle.loads(base64.b64decode(output))["post"].startswith("post-")
        )
        meter_counts = _paid_calls(meter)
        expected_paid = args.runs * PAID_CALLS_PER_RUN
        if posted != args.runs or artifacts != args.runs:
            raise SystemExit(f"{posted} runs posted, {artifacts} artifacts, of {args.runs}")
        if meter_counts != {"billed_keys": expected_paid, "repeats": 0}:
            raise SystemExit(f"paid calls {meter_counts}, expected {expected_paid} billed once")
        _common.emit_result(
            {
                "workers": args.workers,
                "runs": args.runs,
                "run_slots": args.run_slots,
                "poll_s": POLL,
                "create_s": created,
                "posted": posted,
                "stages": len(done),
                "artifacts": artifacts,
                "overall_rpm": args.runs / ((last_done - first_start) / 1000) * 60,
                "steady_rpm": steady_stages / STAGES / steady_s * 60,
                "steady_stages": steady_stages,
                "p50_ms": _percentile(latencies, 50),
                "p95_ms": _percentile(latencies, 95),
                "meter": meter_counts,
                "expected_paid": expected_paid,
                "machine_busy": (machine_end[0] - machine_start[0])
                / (machine_end[1] - machine_start[1]),
                "worker_cpu_ms_per_run": worker_cpu * 1000 * STAGES / steady_stages,
                "pg_cpu_ms_per_run": None
                if pg_start is None or pg_end is None
                else (pg_end - pg_start) * 1000 * STAGES / steady_stages,
            }
        )
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
        _common.drop_pg_database(database)
        shutil.rmtree(var_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--run-slots", type=int, default=2, help="run workflows one process orchestrates at once"
    )
    parser.add_argument(
        "--poll", type=float, default=POLL, help="seconds between queue and result polls"
    )
    parser.add_argument(
        "--database",
        default=os.environ.get("DBOS_FLEET_DATABASE", "resumer_dbos_fleetbench"),
        help="scratch database on BENCH_PG_URL's server (dropped and created)",
    )
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--ready", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.url, Path(args.ready))
    else:
        driver(args)


if __name__ == "__main__":
    main()

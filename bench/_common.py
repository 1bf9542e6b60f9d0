"""Helpers shared by the bench scripts (not a bench itself).

Every bench measures one database per child process: Django can be set up once per process,
and a child started with its own DATABASE_URL gets exactly the settings a deployment would.
The parent creates the scratch databases (a SQLite file in a temp folder; a PostgreSQL
database it creates and drops) and prints the summary.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
# Where the scratch PostgreSQL database is created; only its server part is used.
PG_SERVER_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
RESULT_PREFIX = "RESULT "


def pg_url(database: str) -> str:
    parts = urlsplit(PG_SERVER_URL)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", "", ""))


def recreate_pg_database(database: str) -> str:
    """Drop and create `database` on the bench server; returns its URL. Raises when the
    server is not reachable, so the caller can say so and skip PostgreSQL."""
    import psycopg

    with psycopg.connect(pg_url("postgres"), autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database}"')
    return pg_url(database)


def drop_pg_database(database: str) -> None:
    import psycopg

    with psycopg.connect(pg_url("postgres"), autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def scratch_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


@contextmanager
def scratch_database(db: str, pg_database: str, prefix: str) -> Iterator[tuple[str, Path] | None]:
    """A throw-away database for one child: a SQLite file in a temp folder, or `pg_database`
    created on the bench server. Yields (DATABASE_URL, var dir), or None (with a line saying
    why) when PostgreSQL cannot be reached; everything is removed afterwards."""
    var_dir = scratch_dir(prefix)
    try:
        if db == "sqlite":
            yield f"sqlite:///{var_dir / 'bench.sqlite3'}", var_dir
            return
        try:
            url = recreate_pg_database(pg_database)
        except Exception as exc:
            print(f"  postgres skipped: cannot create {pg_database} ({exc})")
            yield None
            return
        try:
            yield url, var_dir
        finally:
            drop_pg_database(pg_database)
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)


@contextmanager
def demo_service(var_dir: Path) -> Iterator[str]:
    """The demo service (the demo pipeline's renderer, asset store, platform and card
    processor) for one child: gunicorn on a free port, its SQLite file in `var_dir`. Yields
    its URL, for the child's DEMO_SERVICE_URL."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from demo_service.process import ServiceProcess

    service = ServiceProcess(
        database=var_dir / "demo-service.sqlite3", log=var_dir / "demo-service.log"
    )
    service.start()
    try:
        yield service.url
    finally:
        service.stop()


def child_env(database_url: str, var_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url,
        RESUMER_VAR_DIR=str(var_dir),
        MEDIA_ROOT=str(var_dir / "media"),
        DJANGO_SETTINGS_MODULE="resumer.settings",
        RESUMER_LOG_LEVEL="ERROR",
        # DEBUG records every query in memory; a deployment runs without it.
        DEBUG="0",
        PYTHONUNBUFFERED="1",
    )
    return env


def setup_django(migrate: bool = True) -> None:
    """In a child: settings come from the environment the parent gave it."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resumer.settings")
    import django

    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)


def emit_result(data: dict) -> None:
    print(RESULT_PREFIX + json.dumps(data), flush=True)


def run_child(script: Path, args: list[str], env: dict[str, str]) -> dict:
    """Run a child, stream its output, return the dict it emitted last."""
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    result: dict = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
        else:
            print(line, end="", flush=True)
    if proc.wait() != 0:
        raise RuntimeError(f"{script.name} {' '.join(args)} exited with {proc.returncode}")
    return result


def bare_and_stage(
    bare: Callable[[int], None], stage: Callable[[int], None], *, runs: int, rounds: int
) -> tuple[float, float]:
    """The median ms a run of an agent bare and as a Resumer stage: each side warmed once
    (imports, connections, the first artifact), then `runs` runs of one side and of the other,
    round after round, so that outside load falls on both. Each run is told its number (from
    1), for an agent whose runs must differ."""
    per_run: dict[str, list[float]] = {"bare": [], "stage": []}
    for side in (bare, stage):
        side(0)
    for round_ in range(rounds):
        for name, side in (("bare", bare), ("stage", stage)):
            started = time.perf_counter()
            for i in range(runs):
                side(round_ * runs + i + 1)
            per_run[name].append((time.perf_counter() - started) / runs * 1000)
    return statistics.median(per_run["bare"]), statistics.median(per_run["stage"])


def drive(run):
    """Execute the run's queued stages in this process until it stops (the demo's fault
    hooks installed); the project's modules are imported here, so a child running another
    checkout drives with that checkout's."""
    from demo import faults
    from runs import engine

    hooks = faults.FaultHooks()
    for _ in range(20):
        run.refresh_from_db()
        if not (run.is_active and run.ticket):
            return run
        engine.execute(
            run.pk, run.current_stage, run.ticket, holder="bench:in-process", hooks=hooks
        )
    raise RuntimeError(f"{run.public_id} did not stop")

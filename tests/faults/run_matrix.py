"""The fault matrix as a script: crash before and after every tool call of every stage of the
demo pipeline, with real Redis and real worker processes, and print the matrix.

    python tests/faults/run_matrix.py                 # SQLite in a temp directory
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/faultbench python tests/faults/run_matrix.py
    python tests/faults/run_matrix.py --case publish  # only cases whose id contains "publish"

It sets up everything it uses: the database (a temporary SQLite file, or DATABASE_URL, which
is created when missing and migrated), a private redis-server on a free port (no
persistence, stopped at the end) and its own worker processes. Each case runs under a fresh
account, and counts only what the simulated outside world received during that case, so the
database may already hold earlier runs. The case runner is tests/faults/matrix.py, the same
code `pytest -m faults tests/faults` runs; pytest does not collect this script.

The last line of the output is `N passed, M failed`; the exit status is 1 if M > 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", ""),
        help="database to use (default: DATABASE_URL, else a temporary SQLite file)",
    )
    parser.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="TEXT",
        help="run only cases whose id contains TEXT (repeatable)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (logs, SQLite, media)"
    )
    return parser.parse_args(argv)


def ensure_postgres_database(url: str) -> None:
    """Create the database named in a postgres:// URL if it does not exist yet."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def configure(workdir: Path, database_url: str, redis_url: str) -> None:
    """Point Django at our own database, Redis and media folder, with the short leases the
    tests use (unless the environment already chose), then set it up."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "resumer.settings"
    os.environ["DATABASE_URL"] = database_url
    os.environ["REDIS_URL"] = redis_url
    os.environ["MEDIA_ROOT"] = str(workdir / "media")
    os.environ["RESUMER_VAR_DIR"] = str(workdir)
    os.environ["RESUMER_TESTING"] = "1"
    import django

    django.setup()
    # The script's own stdout is the report; engine warnings would only interleave with it.
    logging.getLogger("runs").setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="fault-matrix-"))
    database_url = args.database_url or f"sqlite:///{workdir / 'matrix.sqlite3'}"
    if database_url.startswith(("postgres://", "postgresql://")):
        ensure_postgres_database(database_url)

    from tests.support.processes import PrivateRedis, Workers, free_port

    port = free_port()
    configure(workdir, database_url, f"redis://127.0.0.1:{port}/0")

    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from demo.simulators import ensure_topic
    from tests.faults import matrix

    redis_server = PrivateRedis(workdir / "redis", port=port).start()
    workers = Workers(workdir / "logs", redis_url=redis_server.url())
    started = time.monotonic()
    results: list[matrix.CaseResult] = []
    cases = [c for c in matrix.all_cases() if not args.case or any(t in c.id for t in args.case)]
    try:
        call_command("migrate", verbosity=0, interactive=False)
        ensure_topic()
        print(
            f"database: {connection.vendor} ({connection.settings_dict['NAME']}), "
            f"redis: {redis_server.url()}, lease TTL {settings.RESUMER_LEASE_TTL:g} s, "
            f"{len(cases)} case(s)",
            flush=True,
        )
        reference = matrix.reference_artifacts(workers)
        print(f"reference run without a crash: {len(reference)} artifacts", flush=True)
        for index, case in enumerate(cases, start=1):
            result = matrix.run_case(case, workers, reference)
            results.append(result)
            print(
                f"[{index:>2}/{len(cases)}] {case.id:<34} {'PASS' if result.passed else 'FAIL'}"
                f" {result.seconds:5.1f}s {result.run_id}",
                flush=True,
            )
    except Exception as exc:
        # Setup or the reference run broke: every case not run counts as failed, and the
        # report still ends with its summary line.
        print(f"ABORTED: {type(exc).__name__}: {exc}", flush=True)
        done = {r.case for r in results}
        results += [
            matrix.CaseResult(c, error=f"not run: {type(exc).__name__}: {exc}")
            for c in cases
            if c not in done
        ]
    finally:
        workers.stop_all()
        redis_server.stop()
        connection.close()

    failed = [r for r in results if not r.passed]
    print(flush=True)
    print(f"wall time: {time.monotonic() - started:.0f} s", flush=True)
    if failed or args.keep:
        print(f"work directory kept: {workdir}", flush=True)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    sys.stderr.flush()
    for line in matrix.format_report(results):
        print(line)
    sys.stdout.flush()
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())

"""The fault matrix as a script: crash before and after every tool call of every stage of the
demo pipeline and around every gate of a reviewed run, then every network fault of every call
to the demo service (drop, late, 5xx, down, and down while a plan reconciles), with real
Redis, a real demo service and real worker processes, and print both matrices.

    python tests/faults/run_matrix.py                 # SQLite in a temp directory
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/faultbench python tests/faults/run_matrix.py
    python tests/faults/run_matrix.py --case publish  # only cases whose id contains "publish"
    python tests/faults/run_matrix.py --case /drop    # only the dropped connections
    python tests/faults/run_matrix.py --case gate:    # only the crashes around a gate

It sets up everything it uses: the database (a temporary SQLite file, or DATABASE_URL, which
is created when missing and migrated), a private redis-server on a free port (no
persistence, stopped at the end), the demo service (the outside world: renderer, asset store,
platform, card processor) on a free port with its own SQLite file, and its own worker
processes. Each case runs under a fresh account, and counts only what the outside world
received during that case, so the database may already hold earlier runs. The case runners are tests/faults/matrix.py and
tests/faults/network.py, the same code `pytest -m faults tests/faults` runs; pytest does not
collect this script.

The last line of the output is `N passed, M failed` (both matrices); the exit status is 1 if
M > 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
import tomllib
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


def pytest_env_defaults() -> dict[str, str]:
    """The environment pytest gives the tests (pyproject.toml's `env`, all "D:NAME=value"
    defaults), for this script, which runs without pytest."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    entries = config["tool"]["pytest"]["ini_options"]["env"]
    return dict(entry.removeprefix("D:").split("=", 1) for entry in entries)


def configure(workdir: Path, database_url: str, redis_url: str, service_url: str) -> None:
    """Point Django at our own database, Redis, demo service and media folder, with the short
    leases and the chain key the tests use (unless the environment already chose), then set
    it up."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "resumer.settings"
    os.environ["DATABASE_URL"] = database_url
    os.environ["REDIS_URL"] = redis_url
    os.environ["DEMO_SERVICE_URL"] = service_url
    os.environ["MEDIA_ROOT"] = str(workdir / "media")
    os.environ["RESUMER_VAR_DIR"] = str(workdir)
    for name, value in pytest_env_defaults().items():
        os.environ.setdefault(name, value)
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

    from demo_service.process import ServiceProcess
    from tests.support.processes import PrivateRedis, Workers, free_port

    port = free_port()
    service = ServiceProcess(database=workdir / "service.sqlite3", log=workdir / "service.log")
    configure(workdir, database_url, f"redis://127.0.0.1:{port}/0", service.url)

    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from demo.simulators import ensure_topic
    from tests.faults import matrix, network

    redis_server = PrivateRedis(workdir / "redis", port=port).start()
    workers = Workers(workdir / "logs", redis_url=redis_server.url())
    started = time.monotonic()
    results: list[matrix.CaseResult] = []
    chosen = [
        c
        for c in [*matrix.all_cases(), *network.all_cases()]
        if not args.case or any(t in c.id for t in args.case)
    ]
    cases = [c for c in chosen if isinstance(c, matrix.Case)]
    network_cases = [c for c in chosen if isinstance(c, network.NetworkCase)]
    try:
        call_command("migrate", verbosity=0, interactive=False)
        ensure_topic()
        service.start()
        print(
            f"database: {connection.vendor} ({connection.settings_dict['NAME']}), "
            f"redis: {redis_server.url()}, demo service: {service.url}, "
            f"lease TTL {settings.RESUMER_LEASE_TTL:g} s, {len(cases)} crash case(s), "
            f"{len(network_cases)} network case(s)",
            flush=True,
        )
        reference = matrix.reference_artifacts(workers)
        print(f"reference run without a crash: {len(reference)} artifacts", flush=True)
        total = len(chosen)
        for index, case in enumerate([*cases, *network_cases], start=1):
            if isinstance(case, matrix.Case):
                result = matrix.run_case(case, workers, reference)
            else:
                result = network.run_network_case(case, workers, service, reference)
            results.append(result)
            print(
                f"[{index:>2}/{total}] {case.id:<40} {'PASS' if result.passed else 'FAIL'}"
                f" {result.seconds:5.1f}s {result.run_id}",
                flush=True,
            )
    except Exception as exc:
        # Setup or the reference run broke: every case not run counts as failed, and the
        # report still ends with its summary line.
        print(f"ABORTED: {type(exc).__name__}: {exc}", flush=True)
        done = {r.case for r in results}
        results += [
            matrix.CaseResult(
                c,
                error=f"not run: {type(exc).__name__}: {exc}",
                invariants=matrix.INVARIANTS
                if isinstance(c, matrix.Case)
                else network.NETWORK_INVARIANTS,
            )
            for c in chosen
            if c not in done
        ]
    finally:
        workers.stop_all()
        service.stop()
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
    crash_results = [r for r in results if isinstance(r.case, matrix.Case)]
    network_results = [r for r in results if not isinstance(r.case, matrix.Case)]
    if crash_results:
        for line in matrix.format_report(crash_results, summary=False):
            print(line)
        print()
    if network_results:
        report = matrix.format_report(
            network_results,
            invariants=network.NETWORK_INVARIANTS,
            title=network.TITLE,
            summary=False,
        )
        for line in report:
            print(line)
        print()
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    sys.stdout.flush()
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())

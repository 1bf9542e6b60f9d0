"""Server time of the inbox, the run page and the pipeline page with 10,000 runs and
1,000,000 events loaded.

    .venv/bin/python bench/pages.py                 # SQLite and PostgreSQL
    .venv/bin/python bench/pages.py --db sqlite     # one of them
    .venv/bin/python bench/pages.py --runs 1000 --events 100000   # a quicker look
    .venv/bin/python bench/pages.py --only pipeline # time only the pages whose name has it
    .venv/bin/python bench/pages.py --db postgres --window-ratio
                                # the pipeline page's 500-run window at 1k and 10k runs

Each database is a scratch one the script creates (a SQLite file in a temp folder; the
PostgreSQL database `resumer_pagebench`, dropped afterwards). With `--keep` the loaded data
is kept and loaded again only when missing (a SQLite file in the temp folder, a PostgreSQL
schema `pagebench_<runs>_<events>` in BENCH_PG_URL's database, which is then never dropped):
loading a million events takes minutes on a small machine. `--window-ratio` times the
pipeline page's 500-run window at 1,000 runs / 100,000 events and at `--runs` / `--events`
(10,000 / 1,000,000) in one run, the two sizes in turn for `--rounds` rounds, and prints the
ratio of their medians: the page must cost what its window holds, not what the database holds
(goal ≤ 1.3×). It keeps what it loaded, as `--keep` does. Filler rows are bulk-inserted
around the append path for speed (the triggers allow INSERT), with a correct seq and hash
chain; each run's filler is cut into stage attempts (STARTED ... VERIFIED), some resumed,
some reusing effects, so the pipeline page aggregates what it would in production.
Requests go through Django's test client, so the time is the server's: middleware,
view, queries and template, no network. It prints median and p95 per page and the number of
SQL queries per page for a small and a large page, which must be equal (no per-row queries).
Goal: p95 under 150 ms on both databases.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/resumer_pagebench")
RESULT_PREFIX = "RESULT "
WINDOW_PAGE = "pipeline page (last 500 runs)"
# The smaller database of --window-ratio: what the issue measured 248 ms at.
SMALL = (1_000, 100_000)


def child(db: str, runs: int, events: int, repeat: int, only: str = "", keep: bool = False) -> None:
    sys.path.insert(0, str(ROOT))
    tmp = tempfile.mkdtemp(prefix="resumer-pagebench-")
    os.environ["RESUMER_VAR_DIR"] = tmp
    # DEBUG keeps every query in memory, which no deployment does.
    os.environ["DEBUG"] = "0"
    os.environ["DATABASE_URL"] = _database_url(db, runs, events, keep, tmp)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resumer.settings")
    import django

    django.setup()
    from django.conf import settings

    settings.ALLOWED_HOSTS = ["testserver"]
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    big_pk = _seeded(runs, events) if keep else None
    if big_pk is None:
        big_pk = _load(runs, events)
        if keep:
            _mark_seeded(runs, events)

    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from runs.models import Run

    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", "bench@example.com", "bench-pass-123"
    )
    client = Client()
    client.force_login(user)
    small_pk = Run.objects.exclude(pk=big_pk).values_list("pk", flat=True).first()
    pages = {
        "inbox": "/runs/",
        "inbox, filtered (status=failed)": "/runs/?status=failed",
        "run page (big run, first timeline page)": f"/runs/run-{big_pk}/",
        "run page (typical run)": f"/runs/run-{small_pk}/",
        "pipeline page (last 100 runs)": "/pipelines/content/",
        WINDOW_PAGE: "/pipelines/content/?runs=500",
    }
    print(f"\n== {db}: {Run.objects.count():,} runs, {_event_count():,} events ==")
    medians: dict[str, float] = {}
    for name, url in pages.items():
        if only not in name:
            continue
        for _ in range(3):  # warm caches and connections
            assert client.get(url).status_code == 200, url
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            response = client.get(url)
            samples.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200
        samples.sort()
        p95 = samples[min(len(samples) - 1, int(round(0.95 * len(samples))) - 1)]
        medians[name] = statistics.median(samples)
        print(f"  {name:<48} median {medians[name]:7.1f} ms   p95 {p95:7.1f} ms")
    # Queries per page must not depend on how many rows the page shows.
    with CaptureQueriesContext(connection) as big:
        client.get(f"/runs/run-{big_pk}/")
    with CaptureQueriesContext(connection) as small:
        client.get(f"/runs/run-{small_pk}/")
    with CaptureQueriesContext(connection) as inbox_full:
        client.get("/runs/")
    with CaptureQueriesContext(connection) as inbox_one:
        client.get(f"/runs/?q=run-{small_pk}")
    with CaptureQueriesContext(connection) as pipeline_wide:
        client.get("/pipelines/content/?runs=500")
    with CaptureQueriesContext(connection) as pipeline_narrow:
        client.get("/pipelines/content/?runs=10")
    print(
        f"  queries: run page {len(big.captured_queries)} (big run) vs "
        f"{len(small.captured_queries)} (few events); inbox {len(inbox_full.captured_queries)} "
        f"(full page) vs {len(inbox_one.captured_queries)} (one row); pipeline page "
        f"{len(pipeline_wide.captured_queries)} (500 runs) vs "
        f"{len(pipeline_narrow.captured_queries)} (10 runs)"
    )
    print(RESULT_PREFIX + json.dumps(medians), flush=True)
    connection.close()
    if db == "postgres" and not keep:
        _drop_pg()


def _database_url(db: str, runs: int, events: int, keep: bool, tmp: str) -> str:
    """The child's database: a scratch one, or with `keep` the one a previous run loaded."""
    if db == "sqlite":
        folder = Path(tempfile.gettempdir()) if keep else Path(tmp)
        name = f"resumer-pagebench-{runs}-{events}.sqlite3" if keep else "bench.sqlite3"
        return f"sqlite:///{folder / name}"
    if not keep:
        _recreate_pg()
        return PG_URL
    schema = f"pagebench_{runs}_{events}"
    name = PG_URL.rsplit("/", 1)[1]
    with _pg_admin() as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    with _pg_admin(PG_URL) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    # libpq reads PGOPTIONS: every table this child makes or reads is in the size's schema.
    os.environ["PGOPTIONS"] = f"-c search_path={schema}"
    return PG_URL


def _seeded(runs: int, events: int) -> int | None:
    """The big run of a database a previous run loaded with this size, or None (emptied)."""
    from django.db import connection

    from runs.ledger.maintenance import maintenance
    from runs.models import Run

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS pagebench_seed (runs INTEGER, events INTEGER)")
        cursor.execute("SELECT runs, events FROM pagebench_seed")
        row = cursor.fetchone()
    if row == (runs, events):
        print(f"  reusing the loaded {runs:,} runs and {events:,} events")
        return Run.objects.order_by("pk").values_list("pk", flat=True).first()
    if Run.objects.exists():
        # A load that was cut short: start again from empty tables.
        from django.core.management import call_command

        with maintenance():
            call_command("flush", interactive=False, verbosity=0)
    return None


def _mark_seeded(runs: int, events: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO pagebench_seed (runs, events) VALUES (%s, %s)", [runs, events])


def _event_count() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM runs_event")
        return cursor.fetchone()[0]


def _pg_admin(url: str = ""):
    import psycopg

    return psycopg.connect(url or PG_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True)


def _recreate_pg() -> None:
    name = PG_URL.rsplit("/", 1)[1]
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _drop_pg() -> None:
    name = PG_URL.rsplit("/", 1)[1]
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _load(runs: int, events: int) -> int:
    """Insert `runs` runs and `events` events; one run holds a tenth of all events."""
    from django.db import transaction

    from runs.ledger.chain import event_hash, hashed_content
    from runs.models import Event, Lease, Run

    statuses = [s for s in Run.Status.values]
    stages = ["research", "draft", "visual", "prefill", "publish"]
    started = time.perf_counter()
    big_events = events // 10
    per_run = max(1, (events - big_events) // max(1, runs - 1))
    with transaction.atomic():
        run_rows = []
        for i in range(runs):
            status = statuses[i % len(statuses)]
            run_rows.append(
                Run(
                    pipeline="content",
                    status=status,
                    attention=Run.attention_for(status),
                    current_stage=stages[i % len(stages)],
                    inputs={"topic": "resumable-agents", "facts": "v3"},
                )
            )
        Run.objects.bulk_create(run_rows, batch_size=2000)
        pks = list(Run.objects.order_by("pk").values_list("pk", flat=True))
        Lease.objects.bulk_create([Lease(run_id=pk) for pk in pks], batch_size=2000)
    big_pk = pks[0]
    batch: list[Event] = []
    heads: dict[int, tuple[int, str]] = {}
    for pk in pks:
        count = big_events if pk == big_pk else per_run
        prev = ""
        for seq in range(1, count + 1):
            type_, payload = _filler(pk, seq)
            event = Event(
                run_id=pk,
                seq=seq,
                stage=stages[(seq // 20) % len(stages)],
                type=type_,
                payload=payload,
                idempotency_key=f"{pk:08x}{seq:056x}",
                actor="worker:bench",
                token=1,
                prev_hash=prev,
            )
            event.hash = event_hash(prev, hashed_content(event))
            prev = event.hash
            batch.append(event)
            if len(batch) >= 5000:
                with transaction.atomic():
                    Event.objects.bulk_create(batch)
                batch = []
        heads[pk] = (count, prev)
    if batch:
        with transaction.atomic():
            Event.objects.bulk_create(batch)
    with transaction.atomic():
        for pk, (seq, head) in heads.items():
            Run.objects.filter(pk=pk).update(last_seq=seq, head_hash=head)
    from django.db import connection

    if connection.vendor == "postgresql":
        # PostgreSQL plans from table statistics; in production autovacuum gathers them
        # within a minute of a bulk load, here the first request would come before it. Without
        # them the planner guesses the window's runs are few and scans the whole event table.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    print(
        f"  loaded {runs:,} runs and {sum(h[0] for h in heads.values()):,} events "
        f"in {time.perf_counter() - started:.0f} s"
    )
    return big_pk


def _filler(pk: int, seq: int) -> tuple[str, dict]:
    """Event `seq` of run `pk`: blocks of 20 per stage, each an attempt (STARTED, tool calls
    and results, VERIFIED); every fourth run was resumed once (a RESUMED opens its third
    block) and some results are reused effects."""
    if seq % 20 == 0:
        resumed = pk % 4 == 0 and seq % 100 == 40
        return ("RESUMED" if resumed else "STARTED"), {"attempt": 0}
    if seq % 20 == 19:
        return "VERIFIED", {}
    if seq % 2 == 0:
        return "TOOL_CALLED", {"call": f"call-{seq % 7}", "tool": "render_image"}
    if seq % 14 == 1:
        return "TOOL_RESULT", {
            "call": f"call-{seq % 7}",
            "tool": "render_image",
            "reused": True,
            "cost": "0",
        }
    return "TOOL_RESULT", {
        "call": f"call-{seq % 7}",
        "tool": "render_image",
        "cost": "0.04",
        "duration_ms": seq % 300,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--only", default="", help="time only pages whose name contains this")
    parser.add_argument("--keep", action="store_true", help="keep the loaded data, reuse it")
    parser.add_argument(
        "--window-ratio",
        action="store_true",
        help="the pipeline page's 500-run window at 1k runs and at --runs, with the ratio",
    )
    parser.add_argument("--rounds", type=int, default=3, help="--window-ratio: rounds per size")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.db, args.runs, args.events, args.repeat, args.only, args.keep)
        return
    # Loading a million events once is enough: the ratio's rounds reuse what they loaded.
    args.keep = args.keep or args.window_ratio
    # One process per database: Django's settings are read once per process.
    for db in ["sqlite", "postgres"] if args.db == "both" else [args.db]:
        if not args.window_ratio:
            _run_child(db, args.runs, args.events, args.repeat, args.only, args.keep)
            continue
        # Small and large in turn, round after round: outside load hits both sizes.
        rounds: dict[str, list[float]] = {"small": [], "large": []}
        for _ in range(args.rounds):
            for size, (runs, events) in (("small", SMALL), ("large", (args.runs, args.events))):
                medians = _run_child(db, runs, events, args.repeat, WINDOW_PAGE, args.keep)
                rounds[size].append(medians[WINDOW_PAGE])
        small, large = (statistics.median(rounds[size]) for size in ("small", "large"))
        print(
            f"\n{db}: {WINDOW_PAGE}, median of {args.rounds} rounds: {small:.1f} ms at "
            f"{SMALL[0]:,} runs / {SMALL[1]:,} events, {large:.1f} ms at {args.runs:,} runs / "
            f"{args.events:,} events: {large / small:.2f}x (goal <= 1.3x)"
        )


def _run_child(
    db: str, runs: int, events: int, repeat: int, only: str, keep: bool
) -> dict[str, float]:
    """One child's output, streamed; returns the medians it reported."""
    command = [sys.executable, __file__, "--child", "--db", db, "--runs", str(runs)]
    command += ["--events", str(events), "--repeat", str(repeat), "--only", only]
    proc = subprocess.Popen(
        command + (["--keep"] if keep else []), stdout=subprocess.PIPE, text=True
    )
    medians: dict[str, float] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(RESULT_PREFIX):
            medians = json.loads(line[len(RESULT_PREFIX) :])
        else:
            print(line, end="", flush=True)
    if proc.wait() != 0:
        raise SystemExit(f"the {db} child exited with {proc.returncode}")
    return medians


if __name__ == "__main__":
    main()

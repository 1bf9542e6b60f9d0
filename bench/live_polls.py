"""What a live page's poll costs: bytes and SQL queries per poll of the run page's timeline,
before (the whole latest page of events again, as every poll got it) and after (only the
events after the page's last seq; nothing, a 204, when nothing moved), for a run of 35
events and one of 2,000; and what the inbox's "N new" poll costs a server.

    .venv/bin/python bench/live_polls.py                      # SQLite
    .venv/bin/python bench/live_polls.py --db postgres
    .venv/bin/python bench/live_polls.py --against /work/main # "before" from another checkout

The child runs the demo pipeline once in this process (its real events, payloads and
artifacts), then makes two runs a worker is moving: copies of those events, cycled to 35 and
to 2,000 events (bulk-inserted with their hash chain, like bench/plan_tail.py's filler), their
lease held and fresh. For each run it reads the run page, appends one event, and polls:

  before  the timeline as the old page asked for it (`timeline/?seen=`): without a poll form
          the view answers the way it always did, the latest page of events and the rest out
          of band; with --against, the same request to a child running the other checkout's
          code on the same kind of data;
  after   the page's poll form: the one new event and the header, decision and plan out of
          band; then once more with nothing new (204).

Then the inbox: the "N new" poll of a page of runs needing a human, answered with nothing
(204) while nothing came, its median server time, and what a hundred open inboxes polling
every INBOX_POLL_SECONDS cost one web worker. Requests go through Django's test client (the
server's side: middleware, view, queries, template; no network), DEBUG off.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

PG_DATABASE = "resumer_pollbench"
SIZES = (35, 2000)
NO_REDIS = "redis://127.0.0.1:9/0"
OPEN_INBOXES = 100
INBOX_RUNS = 300


# --- child: one database, one checkout --------------------------------------------------------


def copy_events(source, run, count: int) -> None:
    """Append `count` events to `run`, cycled from `source`'s log after its RUN_CREATED,
    chained with the ledger's own hashing; the run's head moves past them."""
    from django.db import transaction
    from django.db.models import F

    from runs.ledger.chain import event_hash, hashed_content
    from runs.models import Event, Run

    model = list(Event.objects.filter(run=source, seq__gt=1).order_by("seq"))
    with transaction.atomic():
        head = Run.objects.select_for_update().get(pk=run.pk)
        seq, prev, rows = head.last_seq, head.head_hash, []
        for i in range(count):
            like = model[i % len(model)]
            seq += 1
            event = Event(
                run_id=run.pk,
                seq=seq,
                stage=like.stage,
                type=like.type,
                inputs=like.inputs,
                payload=like.payload,
                payload_ref=like.payload_ref,
                artifacts=like.artifacts,
                idempotency_key=like.idempotency_key and f"{like.idempotency_key[:48]}{seq:016x}",
                actor=like.actor,
                token=None,
                prev_hash=prev,
            )
            event.hash = prev = event_hash(prev, hashed_content(event))
            rows.append(event)
        Event.objects.bulk_create(rows, batch_size=1000)
        Run.objects.filter(pk=run.pk).update(
            last_seq=seq, head_hash=prev, version=F("version") + count, current_stage=like.stage
        )


def moving_run(source, events: int):
    """A run of `events - 1` events that a worker holds (status running, a fresh lease)."""
    from datetime import timedelta

    from django.utils import timezone

    from demo import faults
    from runs.models import Lease, Run

    run = faults.start_run("content", {}, actor="bench", faults={}, enqueue=False)
    copy_events(source, run, events - 1 - run.last_seq)
    now = timezone.now()
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING, attention=Run.attention_for(Run.Status.RUNNING)
    )
    Lease.objects.filter(run=run).update(
        holder="worker:bench", token=1, heartbeat_at=now, expires_at=now + timedelta(hours=1)
    )
    return Run.objects.get(pk=run.pk)


def poll_form(html: str) -> dict[str, str]:
    """The page's poll: its form's fields, or (the old page) its `seen` alone."""
    form = re.search(r'<form id="timeline-poll".*?</form>', html, re.S)
    if form:
        return dict(re.findall(r'name="(\w+)" value="([^"]*)"', form.group(0)))
    return {"seen": re.search(r'"seen": "([^"]+)"', html).group(1)}


def measured(client, url: str, data: dict[str, str]) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url, data, headers={"HX-Request": "true"})  # warm
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, data, headers={"HX-Request": "true"})
    return {
        "status": response.status_code,
        "bytes": len(response.content),
        "queries": len(queries.captured_queries),
        "html": response.content.decode(),
    }


def timeline_polls(client, source, events: int, before_only: bool) -> dict:
    run = moving_run(source, events)
    page = client.get(f"/runs/{run.public_id}/").content.decode()
    form = poll_form(page)
    copy_events(source, run, 1)  # what a worker did since the page was drawn
    url = f"/runs/{run.public_id}/timeline/"
    result = {"events": run.last_seq + 1}
    result["before"] = measured(client, url, {"seen": form["seen"]})
    if not before_only:
        news = measured(client, url, form)
        assert news["status"] == 200 and "timeline-poll" in news["html"], news["status"]
        result["after"] = news
        result["quiet"] = measured(client, url, poll_form(news["html"]))
        assert result["quiet"]["status"] == 204, result["quiet"]["status"]
    for kind in ("before", "after", "quiet"):
        result.get(kind, {}).pop("html", None)
    return result


def inbox_poll(client) -> dict:
    """The inbox's "N new" poll, answered while nothing came: bytes, queries, median time."""
    from django.utils import timezone

    from runs.dashboard.views import INBOX_POLL_SECONDS
    from runs.models import Run

    status = Run.Status.INTERRUPTED
    Run.objects.bulk_create(
        Run(pipeline="content", status=status, attention=Run.attention_for(status))
        for _ in range(INBOX_RUNS)
    )
    client.get("/runs/")
    data = {"since": timezone.now().isoformat()}
    quiet = measured(client, "/runs/news/", data)
    samples = []
    for _ in range(200):
        start = time.perf_counter()
        client.get("/runs/news/", data, headers={"HX-Request": "true"})
        samples.append((time.perf_counter() - start) * 1000)
    quiet.pop("html")
    return {**quiet, "median_ms": statistics.median(samples), "every_s": INBOX_POLL_SECONDS}


def child(db: str, root: Path, before_only: bool) -> None:
    os.environ["REDIS_URL"] = NO_REDIS
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resumer.settings")
    # The project from `root` (not _common.setup_django's, which is this checkout's).
    os.chdir(root)
    sys.path.insert(0, str(root))
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django.contrib.auth.models import User
    from django.test import Client

    from demo import faults
    from demo.simulators import ensure_topic

    settings.ALLOWED_HOSTS = ["testserver"]
    ensure_topic()
    source = _common.drive(faults.start_run("content", {}, actor="bench", faults={}, enqueue=False))
    client = Client()
    client.force_login(User.objects.create_superuser("bench", "bench@example.com", "bench-123"))
    result = {
        "db": db,
        "source_events": source.last_seq,
        "runs": {str(n): timeline_polls(client, source, n, before_only) for n in SIZES},
    }
    if not before_only:
        result["inbox"] = inbox_poll(client)
    _common.emit_result(result)


# --- parent ----------------------------------------------------------------------------------


def measure(db: str, root: Path, before_only: bool) -> dict | None:
    with _common.scratch_database(db, PG_DATABASE, "resumer-pollbench-") as scratch:
        if scratch is None:
            return None
        url, var_dir = scratch
        with _common.demo_service(var_dir) as service_url:
            env = {**_common.child_env(url, var_dir), "DEMO_SERVICE_URL": service_url}
            # The child imports the project from `root`: this checkout, or the one compared.
            env["PYTHONPATH"] = str(root)
            if root != _common.ROOT:
                env["PYTHONDONTWRITEBYTECODE"] = "1"  # read the other checkout, write nothing
            args = ["--child", db, "--root", str(root)] + (["--before-only"] if before_only else [])
            return _common.run_child(Path(__file__), args, env)


def report(db: str, now: dict, old: dict | None) -> None:
    print(f"\n== {db}: timeline polls (the demo's run has {now['source_events']} events) ==")
    for size, run in now["runs"].items():
        before = (old or now)["runs"][size]["before"]
        after, quiet = run["after"], run["quiet"]
        where = "other checkout" if old else "whole timeline"
        print(
            f"  run of {run['events']:>5} events: before ({where}) {before['bytes']:>7,} B, "
            f"{before['queries']} queries; after, one new event {after['bytes']:>6,} B, "
            f"{after['queries']} queries ({before['bytes'] / after['bytes']:.0f}x fewer bytes); "
            f"nothing new: {quiet['status']}, {quiet['bytes']} B, {quiet['queries']} queries"
        )
    inbox = now["inbox"]
    load = OPEN_INBOXES / inbox["every_s"] * inbox["median_ms"] / 1000
    print(
        f"  inbox 'N new' poll, nothing new: {inbox['status']}, {inbox['bytes']} B, "
        f"{inbox['queries']} queries, median {inbox['median_ms']:.1f} ms; {OPEN_INBOXES} open "
        f"inboxes asking every {inbox['every_s']} s keep {load:.0%} of one web worker busy "
        f"(server-sent events would hold one sync worker per open inbox)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--against", type=Path, help="a checkout whose polls are 'before'")
    parser.add_argument("--child", choices=("sqlite", "postgres"), help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--before-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.root, args.before_only)
        return
    old = measure(args.db, args.against.resolve(), True) if args.against else None
    now = measure(args.db, _common.ROOT, False)
    if now is not None:
        report(args.db, now, old)


if __name__ == "__main__":
    main()

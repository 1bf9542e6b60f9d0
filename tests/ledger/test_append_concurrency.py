"""Concurrent writers on one run: the append path assigns every seq exactly once.

All writers share one Writer (one fencing token), so they contend on the append path itself,
not on the lease: that is the case the row lock (PostgreSQL) or the IMMEDIATE transaction
(SQLite) has to serialise. Each thread has its own database connection and closes it.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection

from runs.events import RunCreated, read
from runs.ledger import leases
from runs.ledger.append import Writer, append, create_run
from runs.ledger.verify import verify_chain
from runs.models import Event, Run
from tests.support.events import called

EVENTS_PER_WRITER = 500


def append_concurrently(writers: int) -> Run:
    run = create_run(
        "content",
        RunCreated(input_versions={"topic": "resumable-agents", "facts": "v3"}),
        actor="test",
        first_stage="research",
    )
    # A long lease: the test is about seq assignment, not about expiry on a slow machine.
    writer = Writer(run.pk, leases.acquire(run.pk, "writers", ttl=3600), "writers")
    start = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            start.wait(timeout=60)
            for n in range(EVENTS_PER_WRITER):
                append(writer, called(n, args={"writer": index, "n": n}))
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    assert not any(thread.is_alive() for thread in threads)
    return run


def assert_gap_free(run: Run, writers: int) -> None:
    total = writers * EVENTS_PER_WRITER + 1  # + RUN_CREATED
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, total + 1))
    written = Counter(
        (args["writer"], args["n"])
        for args in (
            read(event).args for event in Event.objects.filter(run=run, type=Event.Type.TOOL_CALLED)
        )
    )
    assert len(written) == writers * EVENTS_PER_WRITER
    assert set(written.values()) == {1}
    assert Run.objects.get(pk=run.pk).last_seq == total
    report = verify_chain(run.pk)
    assert report.ok, report.problems


def test_eight_writers_on_postgresql_append_4000_events_without_gap_or_duplicate(
    transactional_db,
):
    if connection.vendor != "postgresql":
        pytest.skip("the 8-writer case is PostgreSQL's; SQLite runs the 4-writer case")
    run = append_concurrently(8)
    assert_gap_free(run, 8)


def test_four_writers_on_sqlite_append_2000_events_without_gap_or_duplicate(transactional_db):
    if connection.vendor != "sqlite":
        pytest.skip("the 4-writer case is SQLite's; PostgreSQL runs the 8-writer case")
    run = append_concurrently(4)
    assert_gap_free(run, 4)

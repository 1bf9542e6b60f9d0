"""On PostgreSQL the ledger's statements run on psycopg's cursor, kept per connection
(runs/ledger/sql/driver.py), unless someone observes the connection: what they write and
read, and how their errors surface, must be what Django's cursor gives."""

from __future__ import annotations

from datetime import UTC

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.transaction import TransactionManagementError

from runs.ledger.append import append
from runs.ledger.sql import for_connection
from runs.ledger.sql.driver import KeptCursor
from runs.models import Event
from tests.ledger.test_ledger import new_run, writer_for
from tests.support.events import called, started

pytestmark = pytest.mark.postgres(reason="the kept cursor is PostgreSQL's")


def _ledger_cursor():
    return for_connection(connection).cursor(connection)


def test_unobserved_appends_run_on_one_kept_cursor(db):
    run = new_run()
    writer = writer_for(run)
    first = append(writer, started("research"))
    kept = _ledger_cursor()
    second = append(writer, called(1, "research"))
    assert isinstance(kept, KeptCursor)
    assert _ledger_cursor() is kept
    assert kept.raw is connection.connection
    stored = Event.objects.filter(run=run, seq__gte=first.seq).order_by("seq")
    assert [(e.pk, e.seq) for e in stored] == [(first.pk, first.seq), (second.pk, first.seq + 1)]


def test_a_reopened_connection_gets_a_new_kept_cursor(transactional_db):
    run = new_run()
    writer = writer_for(run)
    append(writer, started("research"))
    before = _ledger_cursor()
    connection.close()
    event = append(writer, called(1, "research"))
    after = _ledger_cursor()
    assert after is not before
    assert after.raw is connection.connection
    assert Event.objects.get(pk=event.pk).seq == event.seq


def test_an_appended_event_reads_as_a_query_reads_it(db):
    run = new_run()
    event = append(writer_for(run), started("research", trace={"k": "v"}))
    stored = Event.objects.get(pk=event.pk)
    assert event.created_at == stored.created_at
    assert event.created_at.tzinfo is UTC
    assert stored.created_at.tzinfo is UTC
    assert (event.seq, event.hash, event.payload) == (stored.seq, stored.hash, stored.payload)


def test_an_error_on_the_kept_cursor_is_djangos_and_breaks_the_atomic_block(db):
    kept = _ledger_cursor()
    with transaction.atomic():
        # An error leaving a block without a savepoint marks the enclosing one broken, as
        # with Django's cursor: the next statement is refused before it is sent.
        with pytest.raises(DatabaseError), transaction.atomic(savepoint=False):
            kept.execute("SELECT no_such_column FROM runs_run")
        assert connection.needs_rollback
        with pytest.raises(TransactionManagementError):
            kept.execute("SELECT 1")
    # The outer atomic block rolled back; the connection and the cursor work on.
    assert kept.execute("SELECT 1").fetchone() == (1,)


def test_an_observed_connection_runs_the_ledger_on_djangos_cursor(db):
    run = new_run()
    writer = writer_for(run)
    seen: list[str] = []

    def record(execute, sql, params, many, context):
        seen.append(sql.split()[0])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        assert not isinstance(_ledger_cursor(), KeptCursor)
        event = append(writer, started("research"))
    # The writer's first append reads the head it chains to, then writes guarded.
    assert seen == ["SELECT", "WITH"]
    assert Event.objects.get(pk=event.pk).type == Event.Type.STARTED

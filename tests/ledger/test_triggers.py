"""Events and checkpoints are append-only at every level: the ORM refuses, and below it the
database's own triggers refuse raw SQL, unless maintenance() lifted them for one
connection."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from django.db import DatabaseError, connection, transaction

from runs.events import RunCreated
from runs.ledger import leases
from runs.ledger.append import RunMove, Writer, create_run
from runs.ledger.checkpoints import write_checkpoint
from runs.ledger.maintenance import maintenance
from runs.models import Checkpoint, Event, ImmutableRowError, Run

TABLES = ("runs_event", "runs_checkpoint")


def run_with_checkpoint() -> tuple[Run, Checkpoint]:
    run = create_run(
        "content",
        RunCreated(input_versions={"topic": "resumable-agents", "facts": "v3"}),
        actor="test",
        first_stage="research",
    )
    writer = Writer(run.pk, leases.acquire(run.pk, "w"), "w")
    checkpoint = write_checkpoint(
        writer,
        run,
        stage="research",
        next_stage="draft",
        manifest={"artifacts": [], "rules": [], "outputs": {}},
        move=RunMove(Run.Status.RUNNING),
    )
    return run, checkpoint


@pytest.fixture
def sealed(db) -> tuple[Run, Checkpoint]:
    return run_with_checkpoint()


def rows(table: str, run: Run) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} WHERE run_id = %s ORDER BY 1", [run.pk])
        return cursor.fetchall()


def refused(sql: str, params: list) -> str:
    """Run `sql` in a savepoint (a PostgreSQL error aborts the enclosing transaction) and
    return the database's error message; fail if the statement went through."""
    with pytest.raises(DatabaseError) as info, transaction.atomic(), connection.cursor() as cur:
        cur.execute(sql, params)
    return str(info.value)


@pytest.mark.parametrize("table", TABLES)
def test_raw_sql_update_is_refused_by_the_database(sealed, table):
    run, _ = sealed
    before = rows(table, run)
    message = refused(f"UPDATE {table} SET stage = 'draft' WHERE run_id = %s", [run.pk])
    assert "append-only" in message or "resumer_maintenance" in message
    assert rows(table, run) == before


@pytest.mark.parametrize("table", TABLES)
def test_raw_sql_delete_is_refused_by_the_database(sealed, table):
    run, _ = sealed
    before = rows(table, run)
    message = refused(f"DELETE FROM {table} WHERE run_id = %s", [run.pk])
    assert "append-only" in message
    assert rows(table, run) == before


@pytest.mark.parametrize("table", TABLES)
def test_truncate_is_refused_on_postgresql(transactional_db, table):
    if connection.vendor != "postgresql":
        pytest.skip("TRUNCATE exists only on PostgreSQL (SQLite's DELETE is covered above)")
    # Committed rows: PostgreSQL refuses TRUNCATE of a table with pending FK trigger events
    # from the same transaction before our trigger could say anything. CASCADE because the
    # run table references checkpoints (a branch point).
    run, _ = run_with_checkpoint()
    before = rows(table, run)
    message = refused(f"TRUNCATE {table} CASCADE", [])
    assert "append-only" in message
    assert rows(table, run) == before


def test_orm_queryset_update_raises_immutable_row_error(sealed):
    run, _ = sealed
    with pytest.raises(ImmutableRowError):
        Event.objects.filter(run=run).update(stage="draft")
    assert not Event.objects.filter(run=run, stage="draft").exists()


def test_orm_queryset_delete_raises_immutable_row_error(sealed):
    run, checkpoint = sealed
    with pytest.raises(ImmutableRowError):
        Checkpoint.objects.filter(pk=checkpoint.pk).delete()
    assert Checkpoint.objects.filter(pk=checkpoint.pk).exists()


def test_orm_save_of_an_existing_event_raises_immutable_row_error(sealed):
    run, _ = sealed
    event = Event.objects.get(run=run, seq=1)
    event.stage = "draft"
    with pytest.raises(ImmutableRowError):
        event.save()
    assert Event.objects.get(pk=event.pk).stage == ""


def test_orm_delete_of_an_event_instance_raises_immutable_row_error(sealed):
    run, _ = sealed
    event = Event.objects.get(run=run, seq=1)
    with pytest.raises(ImmutableRowError):
        event.delete()
    assert Event.objects.filter(pk=event.pk).exists()


def test_maintenance_allows_raw_sql_on_its_own_connection_and_closes_again(sealed):
    run, _ = sealed
    with maintenance(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_event SET stage = 'draft' WHERE run_id = %s AND seq = 1", [run.pk]
        )
    assert Event.objects.get(run=run, seq=1).stage == "draft"
    refused("UPDATE runs_event SET stage = 'publish' WHERE run_id = %s", [run.pk])
    assert Event.objects.get(run=run, seq=1).stage == "draft"


def test_maintenance_on_one_connection_leaves_other_connections_refused(transactional_db):
    # Committed data, so the other thread's connection sees the row its UPDATE must refuse.
    run, _ = run_with_checkpoint()
    outcome: dict[str, object] = {}

    def other_connection() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("UPDATE runs_event SET stage = 'draft' WHERE run_id = %s", [run.pk])
            outcome["error"] = None
        except DatabaseError as exc:
            outcome["error"] = str(exc)
        finally:
            connection.close()

    with maintenance():
        thread = threading.Thread(target=other_connection)
        thread.start()
        thread.join(timeout=60)
    assert outcome["error"] and "append-only" in str(outcome["error"])
    assert not Event.objects.filter(run=run, stage="draft").exists()


def test_a_raw_sqlite_client_is_refused_because_it_lacks_the_guard_function(
    transactional_db,
):
    if connection.vendor != "sqlite":
        pytest.skip("the raw-client guard is SQLite's; PostgreSQL is covered by its triggers")
    run, _ = run_with_checkpoint()
    raw = sqlite3.connect(connection.settings_dict["NAME"], timeout=30)
    try:
        with pytest.raises(sqlite3.OperationalError, match="resumer_maintenance"):
            raw.execute("DELETE FROM runs_event WHERE run_id = ?", (run.pk,))
        raw.rollback()
    finally:
        raw.close()
    assert Event.objects.filter(run=run).count() == 2

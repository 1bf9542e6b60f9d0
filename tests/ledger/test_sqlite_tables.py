"""The tables every tool call inserts into, as SQLite holds them (migration 0026): rowid
tables, their vocabularies checked by comparisons, still refusing what is not in them."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection

from runs.ledger import maintenance
from runs.models import Event
from tests.ledger.test_ledger import new_run

pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="the SQLite tables' own definition"
)

LEDGER_TABLES = ("runs_event", "runs_effect")


def table_sql(table: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = %s", [table])
        return cursor.fetchone()[0]


@pytest.mark.parametrize("table", LEDGER_TABLES)
def test_a_ledger_table_is_a_rowid_table_without_autoincrement(db, table):
    assert '"id" integer NOT NULL PRIMARY KEY,' in table_sql(table)
    assert "AUTOINCREMENT" not in table_sql(table)


@pytest.mark.parametrize("table", LEDGER_TABLES)
def test_a_ledger_tables_vocabulary_is_checked_by_comparisons(db, table):
    sql = table_sql(table)
    assert " IN (" not in sql
    assert ("\"type\" = 'TOOL_CALLED'" if table == "runs_event" else "\"policy\" = 'NEVER'") in sql


def test_an_event_of_no_known_type_is_refused_by_the_database(transactional_db):
    run = new_run()
    row = Event.objects.filter(run=run).values().get()
    refused = pytest.raises(IntegrityError, match="event_type_valid")
    with maintenance.maintenance(), connection.cursor() as cursor, refused:
        cursor.execute(
            "INSERT INTO runs_event (run_id, seq, stage, type, inputs, payload, payload_ref, "
            "artifacts, idempotency_key, actor, token, prev_hash, hash) "
            "VALUES (%s, 2, '', 'NOT_A_TYPE', '{}', '{}', '', '[]', '', 'x', NULL, %s, 'h')",
            [run.pk, row["hash"]],
        )
    assert Event.objects.filter(run=run).count() == 1

"""An effect's outcome updates its row in place (issue 49): effect_status_idx goes, so the
settle's UPDATE moves no indexed column, and PostgreSQL leaves a fifth of each effects page
free (fillfactor 80) for it. That update is then HOT: one new row version on the same page
and no index entry, where it added one to each of the table's four indexes on every call.

The index served only the admin's effect list (its status filter, and the runs that still
have an unsettled effect, which an exclude() could not read it for anyway); that list now
reads the table, or walks effect_run_call_idx backwards by run. SQLite drops the index alone
(no rebuild); it has no fillfactor.

The effect rows' guard (0014) is asked more cheaply of the ledger's own writes, which every
write of a tool call's effect is. On PostgreSQL the trigger says in its WHEN what its function
checks first, so for them the function (plpgsql, 11 us a row under auto_explain) is not called
at all; on SQLite, whose WHEN calls into Python, it asks first whether the write is the
ledger's, sparing the question about maintenance."""

import importlib

from django.db import migrations

FILLFACTOR = 80
guard = importlib.import_module("runs.migrations.0014_effect_write_guard")


def sqlite_triggers() -> list[str]:
    table = guard.TABLE
    forward = []
    for op in ("INSERT", "UPDATE", "DELETE"):
        name = f"{table}_ledger_only_{op.lower()}"
        forward.append(
            f"CREATE TRIGGER {name} BEFORE {op} ON {table} "
            f"WHEN resumer_ledger() = 0 AND resumer_maintenance() = 0 "
            f"BEGIN SELECT RAISE(ABORT, '{table} is written by the ledger only: {op} refused'); "
            f"END;"
        )
    return forward


# The function (0014) still decides, and raises, whenever the WHEN lets a write reach it.
PG_TRIGGER = (
    f"CREATE TRIGGER {guard.TABLE}_ledger_only BEFORE INSERT OR UPDATE OR DELETE ON {guard.TABLE} "
    "FOR EACH ROW WHEN (current_setting('resumer.ledger', true) IS DISTINCT FROM 'on' "
    "AND current_setting('resumer.maintenance', true) IS DISTINCT FROM 'on') "
    "EXECUTE FUNCTION resumer_ledger_only();"
)
PG_DROP = f"DROP TRIGGER IF EXISTS {guard.TABLE}_ledger_only ON {guard.TABLE};"


def forward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE runs_effect SET (fillfactor = {FILLFACTOR})")
        for sql in (PG_DROP, PG_TRIGGER):
            schema_editor.execute(sql, params=None)
    elif vendor == "sqlite":
        for sql in guard.sqlite_sql()[1] + sqlite_triggers():
            schema_editor.execute(sql, params=None)


def backward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute("ALTER TABLE runs_effect RESET (fillfactor)")
        for sql in (PG_DROP, guard.pg_sql()[0][1]):
            schema_editor.execute(sql, params=None)
    elif vendor == "sqlite":
        for sql in guard.sqlite_sql()[1] + guard.sqlite_sql()[0]:
            schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0023_asks_and_resume_severity"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="effect", name="effect_status_idx"),
        migrations.RunPython(forward, backward),
    ]

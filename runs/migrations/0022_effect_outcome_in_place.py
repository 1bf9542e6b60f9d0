"""An effect's outcome updates its row in place (issue 49): effect_status_idx goes, so the
settle's UPDATE moves no indexed column, and PostgreSQL leaves a fifth of each effects page
free (fillfactor 80) for it. That update is then HOT: one new row version on the same page
and no index entry, where it added one to each of the table's four indexes on every call.

The index served only the admin's effect list (its status filter, and the runs that still
have an unsettled effect, which an exclude() could not read it for anyway); that list now
reads the table, or walks effect_run_call_idx backwards by run. SQLite drops the index alone
(no rebuild); it has no fillfactor.

On SQLite the effect rows' triggers (0014) ask first whether the write is the ledger's own:
every write of a tool call's effect is, and the question is a call into Python, so asking it
first spares the one about maintenance on each of them."""

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


def forward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE runs_effect SET (fillfactor = {FILLFACTOR})")
    elif vendor == "sqlite":
        for sql in guard.sqlite_sql()[1] + sqlite_triggers():
            schema_editor.execute(sql, params=None)


def backward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute("ALTER TABLE runs_effect RESET (fillfactor)")
    elif vendor == "sqlite":
        for sql in guard.sqlite_sql()[1] + guard.sqlite_sql()[0]:
            schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0021_stop_kind_codes"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="effect", name="effect_status_idx"),
        migrations.RunPython(forward, backward),
    ]

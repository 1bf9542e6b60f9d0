"""The tables every tool call inserts into, events and effects, rebuilt on SQLite (issue 49):

- their ids are the rowid without AUTOINCREMENT (models.RowIdField), which read and rewrote
  sqlite_sequence in each insert, one page more in each of a call's two commits;
- their vocabulary checks (an event's type, an effect's status and policy) are comparisons
  or'd (models.OneOf on SQLite), where an IN list built its lookup table in every insert.

The same values and constraints by name; only the SQL SQLite checks them with changes. SQLite
rebuilds a table to change either, which drops its triggers: the append-only triggers (0002)
and the effect rows' guard (0024) are installed again, as in 0022. On PostgreSQL the ids'
identity columns and the checks are as they were, and nothing is run; the models' state
alone changes. Going back leaves SQLite's tables as they are (the same rows and refusals)."""

import importlib

from django.db import migrations

import runs.models

append_only = importlib.import_module("runs.migrations.0002_append_only_triggers")
guard = importlib.import_module("runs.migrations.0014_effect_write_guard")
in_place = importlib.import_module("runs.migrations.0024_effect_outcome_in_place")


def rebuild_on_sqlite(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for name in ("Event", "Effect"):
        # Django's own rebuild, as an AlterField runs it: the table made again from the
        # model's state, its rows copied, its indexes and constraints made again.
        schema_editor._remake_table(apps.get_model("runs", name))
    forward, backward = append_only.sqlite_sql()
    for sql in backward + forward + guard.sqlite_sql()[1] + in_place.sqlite_triggers():
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0025_check_lists_as_one_constant"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="effect",
                    name="id",
                    field=runs.models.RowIdField(primary_key=True, serialize=False),
                ),
                migrations.AlterField(
                    model_name="event",
                    name="id",
                    field=runs.models.RowIdField(primary_key=True, serialize=False),
                ),
            ],
        ),
        migrations.RunPython(rebuild_on_sqlite, migrations.RunPython.noop),
    ]

"""CANCELLED was in both vocabularies but nothing ever wrote it: the run status and the event
type go. On SQLite, changing the events table's check constraint rebuilds the table, which
drops its append-only triggers (see 0002), so they are installed again."""

import importlib

from django.db import migrations, models

triggers = importlib.import_module("runs.migrations.0002_append_only_triggers")


def reinstall_sqlite_triggers(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return  # PostgreSQL alters constraints in place; its triggers stay
    forward, backward = triggers.sqlite_sql()
    for sql in backward + forward:
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0003_remove_run_options"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="event",
            name="event_type_valid",
        ),
        migrations.RemoveConstraint(
            model_name="run",
            name="run_status_valid",
        ),
        migrations.AlterField(
            model_name="event",
            name="type",
            field=models.CharField(
                choices=[
                    ("RUN_CREATED", "Run created"),
                    ("STARTED", "Stage started"),
                    ("TOOL_CALLED", "Tool called"),
                    ("TOOL_RESULT", "Tool result"),
                    ("VERIFIED", "Verified"),
                    ("FAILED", "Failed"),
                    ("INTERRUPTED", "Interrupted"),
                    ("NEEDS_APPROVAL", "Needs approval"),
                    ("PLAN_APPROVED", "Plan approved"),
                    ("RECONCILED", "Effect reconciled"),
                    ("RESUMED", "Resumed"),
                    ("BRANCHED", "Branched"),
                    ("SUCCEEDED", "Succeeded"),
                    ("LEDGER_EDITED", "Ledger edited"),
                ],
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("running", "Running"),
                    ("interrupted", "Interrupted"),
                    ("failed", "Failed"),
                    ("needs_approval", "Needs approval"),
                    ("resuming", "Resuming"),
                    ("succeeded", "Succeeded"),
                    ("superseded", "Superseded"),
                ],
                default="pending",
                max_length=20,
            ),
        ),
        migrations.AddConstraint(
            model_name="event",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "type__in",
                        [
                            "RUN_CREATED",
                            "STARTED",
                            "TOOL_CALLED",
                            "TOOL_RESULT",
                            "VERIFIED",
                            "FAILED",
                            "INTERRUPTED",
                            "NEEDS_APPROVAL",
                            "PLAN_APPROVED",
                            "RECONCILED",
                            "RESUMED",
                            "BRANCHED",
                            "SUCCEEDED",
                            "LEDGER_EDITED",
                        ],
                    )
                ),
                name="event_type_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "pending",
                            "running",
                            "interrupted",
                            "failed",
                            "needs_approval",
                            "resuming",
                            "succeeded",
                            "superseded",
                        ],
                    )
                ),
                name="run_status_valid",
            ),
        ),
        migrations.RunPython(reinstall_sqlite_triggers, reinstall_sqlite_triggers),
    ]

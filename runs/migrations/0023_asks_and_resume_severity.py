"""Two changes of issue 48.

An operator may ask a supervisor from an effect's page (runs/asks.py): SupervisorAsk records
who asked and the notification that carries it.

A resumed run that stopped again ranks above fresh failures in the inbox (Run.severity): the
severities after "deviated" move one down to make room for "its resume stopped again", and the
stopped runs that were resumed (an approval's attempt, or an upgrade's branch) take it. A
blocked or deviated run keeps its rank, as the stored plan gives it (stored_plans._rank)."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models
from django.db.models import Q

# Frozen copies of Run.Severity as it was and is, and of Run.RESUMABLE.
OLD_FAILED, OLD_INTERRUPTED = 4, 5
RESUME_FAILED, FAILED, INTERRUPTED = 4, 5, 6
RESUMABLE = ("interrupted", "failed", "needs_approval")


def forwards(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    Run.objects.filter(severity=OLD_INTERRUPTED).update(severity=INTERRUPTED)
    Run.objects.filter(severity=OLD_FAILED).update(severity=FAILED)
    Run.objects.filter(
        Q(attempt__gt=0) | Q(parent__isnull=False),
        attention=0,
        status__in=RESUMABLE,
        severity__in=(FAILED, INTERRUPTED),
    ).update(severity=RESUME_FAILED)


def backwards(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    resumed = Run.objects.filter(severity=RESUME_FAILED)
    resumed.filter(status="interrupted").update(severity=INTERRUPTED)
    resumed.exclude(status="interrupted").update(severity=FAILED)
    Run.objects.filter(severity=FAILED).update(severity=OLD_FAILED)
    Run.objects.filter(severity=INTERRUPTED).update(severity=OLD_INTERRUPTED)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0022_replay_events"),
    ]

    operations = [
        migrations.CreateModel(
            name="SupervisorAsk",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("asked_by", models.CharField(max_length=160)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "effect",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="asks",
                        to="runs.effect",
                    ),
                ),
                (
                    "notification",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="asks",
                        to="runs.notification",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
        migrations.RunPython(forwards, backwards),
    ]

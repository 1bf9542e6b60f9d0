"""The inbox orders runs that need a human by severity (issue 24): waiting, blocked, deviated,
failed, interrupted, then by age. The severity is a stored column, kept by the append path
with `attention` and raised to blocked by the stored plan, so the inbox still pages on one
index (run_inbox_idx, now attention, severity, -updated_at, -id) instead of sorting on a
CASE expression over a join."""

from django.db import migrations, models
from django.db.models import Case, Q, Value, When

WAITING, BLOCKED, DEVIATED, FAILED, INTERRUPTED = 1, 2, 3, 4, 5
RESUMABLE = ("interrupted", "failed", "needs_approval")


def backfill(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    StoredPlan = apps.get_model("runs", "StoredPlan")
    blocked = StoredPlan.objects.filter(
        blocked=True, run_version=models.OuterRef("version")
    ).filter(run_id=models.OuterRef("pk"))
    Run.objects.filter(attention=0).update(
        severity=Case(
            When(status="waiting", then=Value(WAITING)),
            When(Q(status__in=RESUMABLE) & Q(models.Exists(blocked)), then=Value(BLOCKED)),
            When(deviated=True, then=Value(DEVIATED)),
            When(status="interrupted", then=Value(INTERRUPTED)),
            default=Value(FAILED),
        )
    )


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0014_effect_write_guard"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="severity",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.RemoveIndex(model_name="run", name="run_inbox_idx"),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["attention", "severity", "-updated_at", "-id"], name="run_inbox_idx"
            ),
        ),
    ]

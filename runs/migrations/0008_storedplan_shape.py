from django.db import migrations, models


def shape_stored_plans(apps, schema_editor):
    """Give the plans stored before shapes existed their group fingerprint, so the runs already
    waiting for a human are grouped too. The shape is read from the stored plan itself."""
    from runs.triage import group_fingerprint

    StoredPlan = apps.get_model("runs", "StoredPlan")
    for stored in StoredPlan.objects.filter(shape="").only("pk", "data").iterator():
        StoredPlan.objects.filter(pk=stored.pk).update(shape=group_fingerprint(stored.data))


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_effect_status_conflict"),
    ]

    operations = [
        migrations.AddField(
            model_name="storedplan",
            name="shape",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddIndex(
            model_name="storedplan",
            # triage.group(): the runs of one group, and the inbox's GROUP BY shape.
            index=models.Index(fields=["shape", "run"], name="storedplan_shape_idx"),
        ),
        migrations.RunPython(shape_stored_plans, migrations.RunPython.noop),
    ]

"""Whether a stored plan offers a resume, beside its price, so the inbox need not read the
plan's data to know not to offer one (a stage its reviewer sent back). Plans stored before
say it in their data: read from there."""

from django.db import migrations, models


def from_data(apps, schema_editor):
    StoredPlan = apps.get_model("runs", "StoredPlan")
    for plan in StoredPlan.objects.only("run_id", "data").iterator():
        if not (plan.data or {}).get("resumable", True):
            StoredPlan.objects.filter(pk=plan.pk).update(resumable=False)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0027_gate_form_class"),
    ]

    operations = [
        migrations.AddField(
            model_name="storedplan",
            name="resumable",
            field=models.BooleanField(default=True),
        ),
        migrations.RunPython(from_data, migrations.RunPython.noop),
    ]

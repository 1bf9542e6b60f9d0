"""The default topic's fact sheet, v1 to v3, so a fresh install can start a run at once."""

from django.db import migrations

TOPIC = "resumable-agents"


def create(apps, schema_editor):
    from demo.simulators import default_facts

    FactSheet = apps.get_model("demo", "FactSheet")
    for version in (1, 2, 3):
        FactSheet.objects.get_or_create(
            topic=TOPIC,
            version=version,
            defaults={"facts": default_facts(TOPIC, version)},
        )


class Migration(migrations.Migration):
    dependencies = [("demo", "0001_initial")]
    operations = [migrations.RunPython(create, migrations.RunPython.noop)]

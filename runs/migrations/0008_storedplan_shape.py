import hashlib
import json

from django.db import migrations, models

# A frozen copy of the plan shape (version 1) as it stood when this migration was written: a
# historical migration must not change meaning when runs/planning/triage.py's shape does.
_STOPPING = {"blocked", "refuse"}


def _canonical_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _shape_v1(plan):
    blockers, effects = [], []
    for line in plan["effects"]:
        effects.append([line["stage"], line["call_id"], line["tool"], line["action"]])
        if line["action"] in _STOPPING:
            kind = line["answer"].split(":", 1)[0]
            blockers.append([line["stage"], line["call_id"], line["status"], kind])
    upgrade = plan["upgrade"]
    return {
        "v": 1,
        "pipeline": plan["pipeline"],
        "status": plan["status"],
        "resumable": plan["resumable"],
        "next_stage": plan["next_stage"],
        "checkpoint_stage": plan["checkpoint_stage"],
        "fell_back": bool(plan["fallbacks"]),
        "effects": effects,
        "blockers": blockers,
        "drift": [[d["input"], d["pinned"], d["current"]] for d in plan["drift"]],
        "upgrade": [upgrade["available"], upgrade["branch_stage"] if upgrade["available"] else ""],
    }


def group_fingerprint(plan):
    return hashlib.sha256(_canonical_json(_shape_v1(plan)).encode()).hexdigest()


def shape_stored_plans(apps, schema_editor):
    """Give the plans stored before shapes existed their group fingerprint, so the runs already
    waiting for a human are grouped too. The shape is read from the stored plan itself."""
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

"""Stop kinds become short codes (replay.StopKind): the stored plans' lines get the code in
place of the words their kind used to be, and their group fingerprint is computed again from
it, so the runs stopped before this change group with those stopped after it.

A stored plan is derived state (one row per run, replaced whenever the plan is computed), not
the append-only event log: rewriting it keeps every reader on one vocabulary, where mapping
old words at read time could not regroup the inbox, which groups by the stored fingerprint in
SQL. The plan's own fingerprint is left as it was: only a blocked plan has a kind, and a
blocked plan is never approved (its approval computes a fresh plan anyway)."""

import hashlib
import json

from django.db import migrations

# The words each kind was stored as, and its code: a frozen copy of replay.StopKind as it
# stood when this migration was written.
CODES = {
    "the delivery key was used for a different request": "key-reused",
    "the target holds a different request under this delivery key": "key-conflict",
    "the target did not answer": "unanswered",
    "found but different": "found-different",
    "the effect ledger row disagrees with its events": "ledger-disagrees",
    "the target refused the request a human confirmed": "refused-confirmed",
}
WORDS = {code: words for words, code in CODES.items()}
_STOPPING = {"blocked", "refuse"}


def _canonical_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _shape_v1(plan):
    """A frozen copy of grouping.shape_of (version 1, the kind read from the line)."""
    blockers, effects = [], []
    for line in plan["effects"]:
        effects.append([line["stage"], line["call_id"], line["tool"], line["action"]])
        if line["action"] in _STOPPING:
            blockers.append([line["stage"], line["call_id"], line["status"], line.get("kind", "")])
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


def _group_fingerprint(plan):
    return hashlib.sha256(_canonical_json(_shape_v1(plan)).encode()).hexdigest()


def _rewrite(apps, table):
    StoredPlan = apps.get_model("runs", "StoredPlan")
    for stored in StoredPlan.objects.only("pk", "data").iterator():
        data = stored.data
        lines = [*data.get("effects", []), *data.get("upgrade", {}).get("effects", [])]
        changed = [line for line in lines if line.get("kind", "") in table]
        if not changed:
            continue
        for line in changed:
            line["kind"] = table[line["kind"]]
        StoredPlan.objects.filter(pk=stored.pk).update(data=data, shape=_group_fingerprint(data))


def codes(apps, schema_editor):
    _rewrite(apps, CODES)


def words(apps, schema_editor):
    _rewrite(apps, WORDS)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0020_close_out_and_ask_again"),
    ]

    operations = [
        migrations.RunPython(codes, words),
    ]

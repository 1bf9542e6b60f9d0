"""Effect rows are written by the ledger only (migration 0014): a plain UPDATE, INSERT or
DELETE of runs_effect is refused by the database, while the append path, an intent on a key
that has an effect, and a supervisor's edit go through."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from runs.ledger.edits import edit_effect
from runs.ledger.maintenance import maintenance
from runs.models import Effect
from tests.support.plans import charge_unknown

pytestmark = pytest.mark.django_db(transaction=True)


def refused(sql: str, params: list) -> str:
    with pytest.raises(DatabaseError) as info, transaction.atomic(), connection.cursor() as cur:
        cur.execute(sql, params)
    return str(info.value)


def row(effect: Effect) -> tuple:
    return Effect.objects.filter(pk=effect.pk).values_list("status", "external_id").get()


def test_a_plain_update_of_an_effect_row_is_refused(facts):
    charge = Effect.objects.get(run=charge_unknown(), call_id="promote-charge")
    before = row(charge)

    message = refused(
        "UPDATE runs_effect SET status = 'confirmed', external_id = 'ch-forged' WHERE id = %s",
        [charge.pk],
    )

    assert "written by the ledger only" in message or "resumer_ledger" in message
    assert row(charge) == before


def test_a_plain_delete_or_insert_of_an_effect_row_is_refused(facts):
    charge = Effect.objects.get(run=charge_unknown(), call_id="promote-charge")

    refused("DELETE FROM runs_effect WHERE id = %s", [charge.pk])
    refused(
        "INSERT INTO runs_effect (delivery_key, run_id, stage, call_id, tool, policy, target, "
        "request_hash, request, status, external_id, error, attempts, cost, created_at, "
        "updated_at) SELECT 'k', run_id, stage, call_id, tool, policy, target, request_hash, "
        "request, 'confirmed', 'x', '', 1, 0, created_at, updated_at FROM runs_effect "
        "WHERE id = %s",
        [charge.pk],
    )

    assert Effect.objects.filter(pk=charge.pk).exists()
    assert not Effect.objects.filter(delivery_key="k").exists()


def test_the_ledgers_own_writes_go_through(facts):
    run = charge_unknown()  # claims, settles and an unknown outcome, through the append path
    charge = Effect.objects.get(run=run, call_id="promote-charge")

    edit_effect(charge.pk, {"status": "failed"}, reason="not charged", actor="user:s")

    assert row(charge) == ("failed", "")


def test_maintenance_lifts_the_guard_for_its_connection(facts):
    charge = Effect.objects.get(run=charge_unknown(), call_id="promote-charge")

    with maintenance(), connection.cursor() as cursor:
        cursor.execute("UPDATE runs_effect SET error = 'purged' WHERE id = %s", [charge.pk])

    assert Effect.objects.get(pk=charge.pk).error == "purged"

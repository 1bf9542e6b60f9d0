"""A supervisor's ledger edit (runs/ledger/edits.py) resolves an effect of a stopped run; it
never rewrites a finished run's history or puts an effect back into doubt."""

from __future__ import annotations

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.ledger.append import LedgerError
from runs.ledger.edits import edit_effect
from runs.models import Effect, Event, Run
from tests.support.plans import charge_unknown

pytestmark = pytest.mark.django_db(transaction=True)


def edited(run: Run) -> int:
    return Event.objects.filter(run=run, type=Event.Type.LEDGER_EDITED).count()


def test_a_succeeded_runs_ledger_is_not_edited(facts):
    run = run_inline(engine.start_run("content", {}, actor="test", enqueue=False).pk)
    charge = Effect.objects.get(run=run, call_id="promote-charge")

    with pytest.raises(LedgerError, match="edited only while the run is stopped"):
        edit_effect(charge.pk, {"external_id": "ch-other"}, reason="typo", actor="user:s")

    assert edited(run) == 0
    assert Effect.objects.get(pk=charge.pk).external_id == charge.external_id


@pytest.mark.parametrize("status", ["intent", "unknown", "conflict"])
def test_an_edit_never_puts_an_effect_back_into_doubt(facts, status):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    edit_effect(charge.pk, {"status": "failed"}, reason="not charged", actor="user:s")

    with pytest.raises(LedgerError, match="only the engine records"):
        edit_effect(charge.pk, {"status": status}, reason="undo", actor="user:s")

    assert Effect.objects.get(pk=charge.pk).status == Effect.Status.FAILED
    assert edited(run) == 1


def test_a_stopped_runs_unknown_charge_is_resolved_as_confirmed(facts):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")

    edit_effect(
        charge.pk,
        {"status": "confirmed", "external_id": "ch-1"},
        reason="the processor holds ch-1",
        actor="user:s",
    )

    assert Effect.objects.get(pk=charge.pk).status == Effect.Status.CONFIRMED
    assert edited(run) == 1


def test_an_edit_that_leaves_an_effect_in_doubt_is_refused(facts):
    # The status kept as it was, only the engine's recorded error cleared: nothing resolved.
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")

    with pytest.raises(LedgerError, match="a call whose outcome nobody knows yet"):
        edit_effect(charge.pk, {"error": ""}, reason="checked", actor="user:s")

    assert Effect.objects.get(pk=charge.pk).error == charge.error != ""
    assert edited(run) == 0


def test_an_abandoned_effect_with_an_external_id_is_refused(facts):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")

    with pytest.raises(LedgerError, match="an abandoned effect has no external id"):
        edit_effect(
            charge.pk,
            {"status": "abandoned", "external_id": "ch-999"},
            reason="not to happen",
            actor="user:s",
        )

    assert Effect.objects.get(pk=charge.pk).status == Effect.Status.UNKNOWN
    assert edited(run) == 0


def test_a_confirmed_effect_said_failed_with_its_external_id_kept_is_refused(facts):
    # The target gave the article its id: "failed" beside it would publish it again.
    run = charge_unknown()
    publish = Effect.objects.get(run=run, call_id="publish")
    assert publish.status == Effect.Status.CONFIRMED and publish.external_id

    with pytest.raises(LedgerError, match=f"if the target holds {publish.external_id}, it is"):
        edit_effect(publish.pk, {"status": "failed"}, reason="never went live", actor="user:s")

    assert Effect.objects.get(pk=publish.pk).status == Effect.Status.CONFIRMED
    assert edited(run) == 0

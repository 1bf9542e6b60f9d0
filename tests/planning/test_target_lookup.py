"""A supervisor asks an unknown effect's target what it holds (a POST's domain call, never a
page view), and records its answer with one ledger edit (runs/planning/target_lookup.py)."""

from __future__ import annotations

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.ledger.append import LedgerError
from runs.ledger.edits import edit_effect
from runs.models import Effect, Event
from runs.planning.planner import compute_plan
from runs.planning.target_lookup import LookupRefused, ask_target, record_answer
from tests.support.plans import charge_unknown, stopped_with_plan

pytestmark = pytest.mark.django_db(transaction=True)


def test_asking_the_target_records_what_it_holds_with_exactly_one_lookup(facts, demo_service):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    before = demo_service.count("charge.lookup", outcome=None)

    asked = ask_target(charge.pk, actor="user:sam")

    assert demo_service.count("charge.lookup", outcome=None) == before + 1
    held = demo_service.charges()[0]["id"]
    assert asked.type == Event.Type.TARGET_ASKED
    assert (asked.payload["found"], asked.payload["external_id"]) == (True, held)
    assert Effect.objects.get(pk=charge.pk).status == Effect.Status.UNKNOWN  # only asked


def test_recording_the_answer_confirms_the_charge_and_unblocks_the_plan(facts, demo_service):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    assert compute_plan(run).blocked
    asked = ask_target(charge.pk, actor="user:sam")

    edit = record_answer(charge.pk, asked.seq, actor="user:sam")

    held = demo_service.charges()[0]["id"]
    effect = Effect.objects.get(pk=charge.pk)
    assert (effect.status, effect.external_id) == (Effect.Status.CONFIRMED, held)
    assert f"event #{asked.seq}" in edit.payload["reason"]
    assert not compute_plan(run).blocked


def test_a_finished_runs_target_is_not_asked(facts, demo_service):
    run = run_inline(engine.start_run("content", {}, actor="test", enqueue=False).pk)
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    before = demo_service.count("charge.lookup", outcome=None)

    with pytest.raises(LookupRefused, match="while the run is stopped"):
        ask_target(charge.pk, actor="user:sam")

    assert demo_service.count("charge.lookup", outcome=None) == before
    assert not Event.objects.filter(run=run, type=Event.Type.TARGET_ASKED).exists()


# --- An edit that says the opposite of the target's recorded answer --------------------------


def test_a_charge_the_processor_holds_is_not_recorded_as_failed(facts, demo_service):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    ask_target(charge.pk, actor="user:sam")

    for status in ("failed", "abandoned"):
        with pytest.raises(LedgerError, match="the call was made, so it is confirmed"):
            edit_effect(charge.pk, {"status": status}, reason="not charged", actor="user:s")

    assert Effect.objects.get(pk=charge.pk).status == Effect.Status.UNKNOWN


def test_a_charge_is_not_confirmed_under_another_id_than_the_processor_holds(facts, demo_service):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    ask_target(charge.pk, actor="user:sam")
    held = demo_service.charges()[0]["id"]

    with pytest.raises(LedgerError, match=f"holds {held} under this key, not ch-99999"):
        edit_effect(
            charge.pk,
            {"status": "confirmed", "external_id": "ch-99999"},
            reason="typed",
            actor="user:s",
        )

    assert Effect.objects.get(pk=charge.pk).status == Effect.Status.UNKNOWN


def test_a_charge_the_processor_holds_nothing_of_is_not_confirmed(facts, demo_service):
    run = stopped_with_plan({"network": {"publish/promote-charge": "5xx"}})
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    asked = ask_target(charge.pk, actor="user:sam")
    assert asked.payload["found"] is False

    with pytest.raises(LedgerError, match="holds nothing under this key: ask it again"):
        edit_effect(
            charge.pk,
            {"status": "confirmed", "external_id": "ch-1"},
            reason="I think it went through",
            actor="user:s",
        )

    assert Effect.objects.get(pk=charge.pk).status != Effect.Status.CONFIRMED


def test_a_charge_a_supervisor_confirmed_is_said_as_theirs_in_the_plan(facts, demo_service):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    asked = ask_target(charge.pk, actor="user:sam")
    record_answer(charge.pk, asked.seq, actor="user:sam")
    held = Effect.objects.get(pk=charge.pk).external_id

    [line] = [e for e in compute_plan(run).effects if e.call_id == "promote-charge"]

    assert line.action == "reuse"
    assert line.answer == f"confirmed as {held}, recorded by a supervisor (user:sam)"

"""A supervisor asks an unknown effect's target what it holds (a POST's domain call, never a
page view), and records its answer with one ledger edit (runs/planning/target_lookup.py)."""

from __future__ import annotations

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.models import Effect, Event
from runs.planning.planner import compute_plan
from runs.planning.target_lookup import LookupRefused, ask_target, record_answer
from tests.support.plans import charge_unknown

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

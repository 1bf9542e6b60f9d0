"""Ask again (runs/gates/reopen.py), the engine called in this process: a charge a supervisor
confirmed and the card processor declined fails the run; its plan says what happened (the
target refused the request; nobody recorded anything) and offers no resume that would send
it again; asking again reopens the gate with the refused attempt, and the next answer's call
is made once, under a key of its own."""

from __future__ import annotations

import pytest

from demo.management.commands.seed_demo import run_inline
from runs.gates import answers
from runs.gates.acts import TICK
from runs.gates.decision import GateAction, decide
from runs.gates.reopen import AskAgainRefused, ask_again, refusals
from runs.ledger.edits import edit_effect
from runs.ledger.verify import verify_chain
from runs.models import Effect, Event, Gate, GateStatus, Run
from runs.planning import stored_plans
from runs.planning.planner import compute_plan
from runs.planning.replay import Action, StopKind
from runs.reads.decision import decision
from tests.gates import pipelines as gp
from tests.support.pipelines import registered
from tests.support.refusals import (
    OVER_LIMIT,
    SUPERVISOR,
    confirm,
    refused_charge,
    waiting_charge,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def gate_pipelines(settings, demo_service, redis_conn):
    with registered(settings, *gp.PATHS):
        yield


def events(run: Run, kind: str) -> list[Event]:
    return list(Event.objects.filter(run=run, type=kind).order_by("seq"))


def test_a_confirmed_charge_the_card_processor_declines_fails_the_run(demo_service):
    run = refused_charge()

    effect = Effect.objects.get(run=run, call_id="fee")
    assert effect.status == Effect.Status.FAILED
    assert "card declined" in effect.error
    assert demo_service.charges() == []
    assert demo_service.count("charge", outcome="declined") == 1


def test_the_plan_says_the_target_refused_and_offers_no_resume_that_sends_it_again():
    run = refused_charge()

    plan = compute_plan(run)

    [line] = [e for e in plan.effects if e.call_id == "fee"]
    assert (line.action, line.kind) == (Action.BLOCKED, StopKind.REFUSED_CONFIRMED)
    assert "the target refused it" in line.answer and "card declined" in line.answer
    assert "after sam confirmed the request" in line.answer
    assert plan.blocked and not plan.can_strict and plan.cost_resume.money == "0.0000"
    assert plan.blockers == [f"charge_card (fee): {line.answer}"]
    assert "ask again, or close the run out" in line.answer
    [gate_line] = plan.gates
    assert "the target refused the call made with it" in gate_line.said
    said = " ".join([line.answer, gate_line.said, *plan.blockers])
    assert "supervisor" not in said


def test_the_run_page_lists_a_refused_calls_blocker_once_as_a_refusal():
    run = refused_charge()
    stored_plans.refresh(run)
    plan, stored = stored_plans.shown(run)

    found = decision(run, plan, stored)

    [line] = [e for e in plan.effects if e.call_id == "fee"]
    assert [(b.text, b.label, b.refused) for b in found.blockers] == [
        (line.reason, "charge_card (pay/fee)", True)
    ]


def test_ask_again_reopens_the_gate_with_the_refused_attempt_and_the_run_waits():
    run = refused_charge()
    [refusal] = refusals(run)

    gate = ask_again(run.pk, actor="user:ana")

    assert gate.pk == refusal.gate.pk
    assert (gate.status, gate.answer, gate.answered_by, gate.votes) == (
        GateStatus.OPEN,
        None,
        "",
        [],
    )
    [attempt] = gate.attempts
    assert attempt["by"] == "sam" and attempt["asked_by"] == "user:ana"
    assert attempt["answer"]["args"]["amount"] == OVER_LIMIT
    assert "card declined" in attempt["error"]
    [reopened] = events(run, Event.Type.GATE_REOPENED)
    assert reopened.actor == "user:ana" and reopened.seq == gate.seq
    assert reopened.payload["refused"]["key"] == refusal.effect.delivery_key
    run.refresh_from_db()
    assert (run.status, run.ticket, run.attention) == (Run.Status.WAITING, "", 0)
    assert verify_chain(run.pk).ok


def test_the_corrected_answer_charges_once_under_a_key_of_its_own(demo_service):
    run = refused_charge()
    refused_key = Effect.objects.get(run=run, call_id="fee").delivery_key
    gate = ask_again(run.pk, actor="user:ana")

    run = confirm(gate, "20.00")

    assert run.status == Run.Status.SUCCEEDED
    [charge] = demo_service.charges()
    assert charge["amount"] == "20.00"
    made = Effect.objects.get(run=run, call_id="fee", status=Effect.Status.CONFIRMED)
    assert made.delivery_key == charge["delivery_key"] != refused_key
    assert events(run, Event.Type.GATE_OPENED)[0].seq < events(run, Event.Type.GATE_REOPENED)[0].seq
    assert verify_chain(run.pk).ok


def test_the_same_arguments_as_the_refused_attempt_still_get_a_new_key(demo_service):
    # The supervisor approved the fee as asked; the account's limit was below it.
    demo_service.set_limit(gp.ACCOUNT, "1.00")
    run = refused_charge(amount="")
    refused = Effect.objects.get(run=run, call_id="fee")
    demo_service.set_limit(gp.ACCOUNT, "50.00")
    gate = ask_again(run.pk, actor="user:ana")

    run = confirm(gate)

    assert run.status == Run.Status.SUCCEEDED
    made = Effect.objects.get(run=run, call_id="fee", status=Effect.Status.CONFIRMED)
    assert made.request == refused.request
    assert made.delivery_key != refused.delivery_key
    assert [c["amount"] for c in demo_service.charges()] == [gp.FEE]


def test_a_second_refusal_can_be_asked_again_and_each_attempt_has_its_own_key(demo_service):
    run = refused_charge()
    run = confirm(ask_again(run.pk, actor="user:ana"), "600.00")
    assert run.status == Run.Status.FAILED

    gate = ask_again(run.pk, actor="user:ana")
    run = confirm(gate, "5.00")

    assert run.status == Run.Status.SUCCEEDED
    assert len(gate.attempts) == 2
    keys = list(
        Effect.objects.filter(run=run, call_id="fee").values_list("delivery_key", flat=True)
    )
    assert len(set(keys)) == 3
    assert len(demo_service.charges()) == 1


def test_ask_again_is_refused_where_no_confirmed_call_was_refused():
    gate = waiting_charge()
    before = Event.objects.filter(run_id=gate.run_id).count()

    with pytest.raises(AskAgainRefused, match="waiting for a decision already"):
        ask_again(gate.run_id, actor="user:ana")

    assert Event.objects.filter(run_id=gate.run_id).count() == before


def test_ask_again_of_a_gate_that_was_not_refused_is_refused():
    run = refused_charge()
    other = waiting_charge()

    with pytest.raises(AskAgainRefused, match="no confirmed call that its target refused"):
        ask_again(run.pk, actor="user:ana", gate_pk=other.pk)

    assert not events(run, Event.Type.GATE_REOPENED)


def test_a_supervisors_edit_to_failed_is_said_as_theirs_and_asks_nobody_again():
    run = refused_charge()
    effect = Effect.objects.get(run=run, call_id="fee")
    edit_effect(effect.pk, {"error": "checked: no charge"}, reason="looked", actor="user:sue")

    plan = compute_plan(run)

    [line] = [e for e in plan.effects if e.call_id == "fee"]
    assert line.action == Action.CALL
    assert "a supervisor recorded that it did not happen (user:sue)" in line.answer
    assert refusals(Run.objects.get(pk=run.pk)) == []


def test_a_reopened_gate_is_answered_like_any_other_and_refuses_a_second_answer():
    run = refused_charge()
    gate = ask_again(run.pk, actor="user:ana")
    answers.answer(gate.pk, {"decision": "approve", TICK: "on"}, actor="sam", roles=SUPERVISOR)

    with pytest.raises(answers.AlreadyAnswered):
        answers.answer(gate.pk, {"decision": "approve", TICK: "on"}, actor="sue", roles=SUPERVISOR)
    assert Gate.objects.get(pk=gate.pk).answered_by == "sam"
    assert run_inline(run.pk).status == Run.Status.SUCCEEDED


def test_the_gate_decision_says_it_was_asked_again():
    run = refused_charge()
    gate = ask_again(run.pk, actor="user:ana")

    decision = decide(gate)

    assert decision.action == GateAction.ASK
    assert "asked again after the target refused attempt 1" in decision.said


def test_ask_again_of_an_unknown_run_is_refused_and_writes_nothing():
    before = Event.objects.count()

    with pytest.raises(AskAgainRefused, match="there is no run 987654"):
        ask_again(987654, actor="user:ana")

    assert Event.objects.count() == before

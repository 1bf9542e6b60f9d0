"""The demo's two gates, the engine called in this process (seed_demo.run_inline): the review
before publish and the supervisor's confirmation of the charge, asked again when the card
processor declines the amount confirmed."""

from __future__ import annotations

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.gates import answers
from runs.gates.acts import TICK
from runs.gates.reopen import ask_again
from runs.models import Event, Gate, GateKind, GateStatus, Lease, Run

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = frozenset({"operator"})
SUPERVISOR = frozenset({"supervisor"})


def start_reviewed() -> Run:
    run = engine.start_run("content", {"review": "on"}, actor="test", enqueue=False)
    return run_inline(run.pk)


def review_data(**changes: str) -> dict[str, str]:
    gate = Gate.objects.get(gate_id="review")
    return {**gate.initial, **changes}


def test_a_reviewed_run_waits_at_the_review_holding_no_lease(facts):
    run = start_reviewed()

    assert run.status == Run.Status.WAITING
    gate = Gate.objects.get(run=run)
    assert (gate.stage, gate.gate_id, gate.kind, gate.status) == (
        "publish",
        "review",
        GateKind.QUESTION,
        GateStatus.OPEN,
    )
    lease = Lease.objects.get(run=run)
    assert lease.holder == "" and run.ticket == ""
    assert Event.objects.filter(run=run, type=Event.Type.GATE_OPENED).count() == 1


def test_the_edited_title_is_published_and_the_edited_amount_charged_under_a_new_key(
    facts, demo_service
):
    run = start_reviewed()
    gate = Gate.objects.get(run=run, gate_id="review")
    answers.answer(gate.pk, review_data(title="Edited title"), actor="ana", roles=OPERATOR)

    run = run_inline(run.pk)
    assert run.status == Run.Status.WAITING
    charge_gate = Gate.objects.get(run=run, gate_id="promote-charge")
    assert charge_gate.kind == GateKind.CONFIRM and charge_gate.role == "supervisor"
    with pytest.raises(answers.NotAllowed):
        answers.answer(charge_gate.pk, {"decision": "approve"}, actor="ana", roles=OPERATOR)
    answers.answer(
        charge_gate.pk,
        {"decision": "approve", "arg_amount": "3.50", TICK: "on"},
        actor="sam",
        roles=SUPERVISOR,
    )

    run = run_inline(run.pk)
    assert run.status == Run.Status.SUCCEEDED
    articles = demo_service.articles()
    assert [a["title"] for a in articles] == ["Edited title"]
    charges = demo_service.charges()
    assert [c["amount"] for c in charges] == ["3.50"]
    answered = Event.objects.get(
        run=run, type=Event.Type.HUMAN_ANSWERED, payload__gate="promote-charge"
    )
    assert answered.payload["diff"] == {"amount": ["5.00", "3.50"]}
    effect = run.effects.get(call_id="promote-charge")
    assert effect.request["amount"] == "3.50"
    assert charges[0]["delivery_key"] == effect.delivery_key


def test_a_promotion_charge_over_the_cards_limit_is_asked_again_and_charged_once(
    facts, demo_service
):
    run = start_reviewed()
    review = Gate.objects.get(run=run, gate_id="review")
    answers.answer(review.pk, review_data(), actor="ana", roles=OPERATOR)
    run = run_inline(run.pk)
    charge_gate = Gate.objects.get(run=run, gate_id="promote-charge")
    answers.answer(
        charge_gate.pk,
        {"decision": "approve", "arg_amount": "75.00", TICK: "on"},
        actor="sam",
        roles=SUPERVISOR,
    )
    run = run_inline(run.pk)
    assert run.status == Run.Status.FAILED
    assert demo_service.charges() == [] and len(demo_service.articles()) == 1

    ask_again(run.pk, actor="user:ana")
    answers.answer(
        charge_gate.pk, {"decision": "approve", TICK: "on"}, actor="sam", roles=SUPERVISOR
    )
    run = run_inline(run.pk)

    assert run.status == Run.Status.SUCCEEDED
    assert [c["amount"] for c in demo_service.charges()] == ["5.00"]
    assert len(demo_service.articles()) == 1
    assert run.checkpoints.get(stage="publish").outputs["charge"] == "charged"

"""A call whose confirmation a human rejected, and that the stage did not go on without: the
plan says a resume hands the stage the same rejection and calls nothing (the recorded answer
is never asked again), instead of promising the call; and the resume does just that. Ask
again is the other way on: the confirmation reopens, and an approval makes the call once."""

from __future__ import annotations

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.gates import answers
from runs.gates.acts import TICK
from runs.gates.reopen import ask_again
from runs.models import ApprovalMode, Event, Gate, GateStatus, ReplayPolicy, Run
from runs.pipeline import Call, KeyParts, Pipeline, Stage, StageOutput, Tool
from runs.planning import stored_plans
from runs.planning.planner import compute_plan
from runs.planning.replay import Action
from runs.planning.resume import approve
from tests.support.pipelines import registered
from tests.support.web import client_as

pytestmark = pytest.mark.django_db(transaction=True)

SENT: list[dict] = []


def _refund(args: dict, key: str) -> dict:
    SENT.append(args)
    return {"external_id": f"rf-{len(SENT)}"}


def _pay(ctx) -> StageOutput:
    ctx.call("refund-1", "refund", amount="12.00")  # a rejection raises CallRejected here
    return StageOutput(outputs={})


refunds = Pipeline(
    name="refund-rejected",
    tools=(
        Tool(
            "refund",
            ReplayPolicy.NEVER,
            call=_refund,
            key=lambda ctx, args: KeyParts("acct", "refund", str(ctx.run_id), "1"),
            cost="12.00",
            confirm=True,
            verb="refund",
        ),
    ),
    stages=(Stage("pay", _pay, tools=("refund",), calls=(Call("refund-1", "refund"),)),),
)


@pytest.fixture
def rejected(settings) -> Run:
    SENT.clear()
    with registered(settings, "tests.planning.test_rejected_call_plan.refunds"):
        run = engine.start_run("refund-rejected", {}, actor="test", enqueue=False)
        run_inline(run.pk)
        gate = Gate.objects.get(run=run, gate_id="refund-1")
        answers.answer(
            gate.pk, {"decision": "reject", "reason": "not this customer"}, actor="sam",
            roles={"operator"},
        )  # fmt: skip
        run = run_inline(run.pk)
        assert run.status == Run.Status.FAILED
        yield run


def test_the_plan_says_the_rejected_call_is_not_made_and_costs_nothing(rejected):
    plan = compute_plan(rejected)

    (line,) = [line for line in plan.effects if line.call_id == "refund-1"]
    assert (line.action, line.cost) == (Action.REJECTED, "0")
    assert line.answer.startswith("by sam (not this customer) at its confirmation")
    assert plan.cost_resume.tool_calls == 0 and not plan.blockers


def test_a_strict_resume_hands_the_stage_the_rejection_and_keeps_its_plan(rejected):
    approve(rejected, ApprovalMode.STRICT, compute_plan(rejected).fingerprint, actor="op")

    run = run_inline(rejected.pk)

    assert run.status == Run.Status.FAILED
    assert SENT == []
    assert not Event.objects.filter(run=run, type=Event.Type.PLAN_DEVIATED).exists()
    failed = Event.objects.filter(run=run, type=Event.Type.FAILED).order_by("seq").last()
    assert failed.seq > Event.objects.get(run=run, type=Event.Type.RESUMED).seq
    assert "rejected by sam: not this customer" in failed.payload["error"]


def test_ask_again_reopens_the_rejected_confirmation_and_an_approval_makes_the_call_once(
    rejected, settings
):
    gate = ask_again(rejected.pk, actor="user:op")

    assert gate.status == GateStatus.OPEN and gate.attempts[0]["sent_back"] is True
    assert gate.attempts[0]["answer"]["reason"] == "not this customer"
    with registered(settings, "tests.planning.test_rejected_call_plan.refunds"):
        answers.answer(
            gate.pk, {"decision": "approve", TICK: "on"}, actor="sam", roles={"operator"}
        )
        run = run_inline(rejected.pk)

    assert run.status == Run.Status.SUCCEEDED
    assert SENT == [{"amount": "12.00"}]


def test_the_run_page_offers_ask_again_for_the_rejection_beside_the_resume(rejected, settings):
    with registered(settings, "tests.planning.test_rejected_call_plan.refunds"):
        stored_plans.refresh(rejected)
        page = client_as("operator").get(f"/runs/{rejected.public_id}/").content.decode()

    assert "sam rejected the call (<q>not this customer</q>)" in page
    assert "hand the stage the same rejection" in page
    assert f'action="/runs/{rejected.public_id}/ask-again/"' in page

"""A question a stage asked and a person answered, asked again in the same run showing
something else (a random id in its details): recorded as a divergence, and the stage stops
for a human instead of asking it forever; its plan offers the branch that runs it afresh.
A value read through ctx.uuid() is the same on every run of the stage, and asks once; a
pipeline that records divergences asks it anew."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.gates import answers
from runs.models import ApprovalMode, Event, Gate, GateStatus, Run
from runs.pipeline import OnDivergence, Pipeline, Stage, StageOutput
from runs.planning import stored_plans
from runs.planning.planner import compute_plan
from runs.planning.replay import StopKind
from runs.planning.resume import approve
from tests.support.pipelines import registered
from tests.support.web import client_as

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = frozenset({"operator"})
HERE = "tests.execution.test_question_divergence"


def _asks(ticket) -> object:
    def stage(ctx) -> StageOutput:
        answer = ctx.ask("ok", "Send the reply?", details=f"ticket {ticket(ctx)}")
        return StageOutput(outputs={"answer": answer["decision"]})

    return stage


careless = Pipeline(
    name="question-random", tools=(), stages=(Stage("reply", _asks(lambda ctx: uuid.uuid4())),)
)
recorded = Pipeline(
    name="question-recorded", tools=(), stages=(Stage("reply", _asks(lambda ctx: ctx.uuid())),)
)
anyway = Pipeline(
    name="question-random-anyway",
    tools=(),
    on_divergence=OnDivergence.RECORD,
    stages=(Stage("reply", _asks(lambda ctx: uuid.uuid4())),),
)


@pytest.fixture(autouse=True)
def pipelines(settings, redis_conn) -> Iterator[None]:
    with registered(settings, f"{HERE}.careless", f"{HERE}.recorded", f"{HERE}.anyway"):
        yield


def answered_once(name: str) -> Run:
    run = run_inline(engine.start_run(name, {}, actor="test", enqueue=False).pk)
    assert run.status == Run.Status.WAITING
    gate = Gate.objects.get(run=run, status=GateStatus.OPEN)
    answers.answer(gate.pk, {"decision": "approve"}, actor="user:ana", roles=OPERATOR)
    return run_inline(run.pk)


def test_a_question_asked_again_showing_other_details_stops_the_stage_for_a_human():
    run = answered_once("question-random")

    assert run.status == Run.Status.NEEDS_APPROVAL
    assert Gate.objects.filter(run=run).count() == 1  # not asked again
    [diverged] = Event.objects.filter(run=run, type=Event.Type.DIVERGED)
    assert (diverged.payload["call"], diverged.payload["stopped"]) == ("ok", True)
    assert diverged.payload["diff"][0]["path"] == "details"
    assert "the question reply/ok was asked again showing other" in diverged.payload["reason"]
    stop = Event.objects.get(run=run, type=Event.Type.NEEDS_APPROVAL)
    assert stop.payload["kind"] == StopKind.DIVERGED
    plan = compute_plan(run)
    assert plan.blocked and plan.branchable and plan.can_upgrade


def test_the_run_stopped_on_a_changed_question_is_upgraded_into_a_branch_that_asks_it():
    run = answered_once("question-random")
    stored_plans.refresh(run)
    page = client_as("operator").get(f"/runs/{run.public_id}/").content.decode()
    assert "a new branch runs it afresh" in page
    assert 'name="action" value="upgrade">Upgrade</button>' in page

    approve(run, ApprovalMode.UPGRADE, compute_plan(run).fingerprint, actor="user:op")

    branch = run_inline(Run.objects.get(parent=run).pk)
    assert branch.status == Run.Status.WAITING
    assert Gate.objects.get(run=branch, status=GateStatus.OPEN).gate_id == "ok"


def test_a_question_that_shows_a_recorded_value_is_asked_once():
    run = answered_once("question-recorded")

    assert run.status == Run.Status.SUCCEEDED
    assert not Event.objects.filter(run=run, type=Event.Type.DIVERGED).exists()


def test_a_pipeline_that_records_divergences_asks_the_question_anew():
    run = answered_once("question-random-anyway")

    assert run.status == Run.Status.WAITING
    assert Gate.objects.filter(run=run).count() == 2
    [diverged] = Event.objects.filter(run=run, type=Event.Type.DIVERGED)
    assert diverged.payload["stopped"] is False

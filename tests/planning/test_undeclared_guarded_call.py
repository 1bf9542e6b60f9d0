"""A stage that makes a call on a NEVER tool without declaring it (`calls=` is optional): the
plan after its crash cannot list the call, so the approved resume stops before it (a call the
plan did not promise, on a tool never guessed about). The fresh plan lists the call the
resume was stopped before (replay_log.ReplayLog.stopped), so approving it again goes on and
the call is made once, instead of every resume stopping at the same place."""

from __future__ import annotations

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.models import ApprovalMode, Effect, Event, ReplayPolicy, Run
from runs.pipeline import KeyParts, Pipeline, Stage, StageOutput, Tool
from runs.planning.planner import compute_plan
from runs.planning.replay import Action
from runs.planning.resume import approve
from tests.support.pipelines import registered

pytestmark = pytest.mark.django_db(transaction=True)

# The payee's own record of payments, and how many times the stage started.
PAID: list[str] = []
STARTS: list[int] = []


def _pay(args: dict, key: str) -> dict:
    PAID.append(key)
    return {"external_id": f"pay-{len(PAID)}"}


def _payout(ctx) -> StageOutput:
    STARTS.append(1)
    if len(STARTS) == 1:
        raise RuntimeError("the first attempt dies before it pays")
    ctx.call("pay", "pay", amount="5.00")
    return StageOutput(outputs={})


payouts = Pipeline(
    name="undeclared-never",
    tools=(
        Tool(
            "pay",
            ReplayPolicy.NEVER,
            call=_pay,
            key=lambda ctx, args: KeyParts("acct", "payee", ctx.run.public_id, "1"),
        ),
    ),
    stages=(Stage("payout", _payout, tools=("pay",)),),
)


@pytest.fixture
def stopped_before_the_call(settings, redis_conn):
    """The run after its crash and one approved strict resume, which stopped before the pay
    call its plan did not list."""
    PAID.clear()
    STARTS.clear()
    with registered(settings, "tests.planning.test_undeclared_guarded_call.payouts"):
        run = run_inline(engine.start_run("undeclared-never", {}, actor="t", enqueue=False).pk)
        assert run.status == Run.Status.FAILED
        approve(run, ApprovalMode.STRICT, compute_plan(run).fingerprint, actor="user:op")
        run = run_inline(run.pk)
        yield run


def test_the_resume_stops_before_a_call_its_plan_did_not_list(stopped_before_the_call):
    run = stopped_before_the_call

    assert run.status == Run.Status.NEEDS_APPROVAL and PAID == []
    deviated = Event.objects.get(run=run, type=Event.Type.PLAN_DEVIATED)
    assert deviated.payload["difference"]["stopped_before_call"] is True


def test_the_fresh_plan_lists_the_call_the_resume_was_stopped_before(stopped_before_the_call):
    plan = compute_plan(stopped_before_the_call)

    (line,) = [e for e in plan.effects if e.call_id == "pay"]
    assert (line.stage, line.tool, line.action) == ("payout", "pay", Action.CALL)
    assert plan.resumable and plan.cost_resume.tool_calls == 1


def test_approving_the_fresh_plan_makes_the_call_once_and_keeps_the_plan(
    stopped_before_the_call, settings
):
    run = stopped_before_the_call
    with registered(settings, "tests.planning.test_undeclared_guarded_call.payouts"):
        approve(run, ApprovalMode.STRICT, compute_plan(run).fingerprint, actor="user:op")
        run = run_inline(run.pk)

    assert run.status == Run.Status.SUCCEEDED
    assert len(PAID) == 1 and Effect.objects.get(run=run).status == Effect.Status.CONFIRMED
    verdicts = Event.objects.filter(
        run=run, type__in=(Event.Type.PLAN_KEPT, Event.Type.PLAN_DEVIATED)
    ).order_by("seq")
    assert [v.type for v in verdicts] == [Event.Type.PLAN_DEVIATED, Event.Type.PLAN_KEPT]

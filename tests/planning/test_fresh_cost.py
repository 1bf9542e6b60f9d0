"""What a fresh retry would spend, beside a resume's price: a call the run made is priced as
it was asked (a tool's `price=` of its arguments), not at the tool's `cost`, which is only
what a plan assumes before it knows."""

from __future__ import annotations

from decimal import Decimal

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.models import ReplayPolicy, Run
from runs.pipeline import Call, Input, KeyParts, Pipeline, Stage, StageOutput, Tool
from runs.planning.planner import compute_plan
from tests.support.pipelines import registered

pytestmark = pytest.mark.django_db(transaction=True)


def _pay(ctx) -> StageOutput:
    ctx.call("refund-1", "refund", amount="40.00")
    return StageOutput(outputs={})


def _then(ctx) -> StageOutput:
    raise RuntimeError("the next stage breaks")


refunds = Pipeline(
    name="refund-priced",
    tools=(
        Tool(
            "refund",
            ReplayPolicy.IDEMPOTENT,
            call=lambda args, key: {"external_id": "rf-1"},
            key=lambda ctx, args: KeyParts("acct", "refund", str(ctx.run_id), "1"),
            price=lambda args: Decimal(args["amount"]),
            verb="refund",
        ),
    ),
    stages=(
        Stage("pay", _pay, tools=("refund",), calls=(Call("refund-1", "refund"),)),
        Stage("then", _then),
    ),
)


def test_a_fresh_retry_is_priced_by_what_the_run_asked(settings):
    with registered(settings, "tests.planning.test_fresh_cost.refunds"):
        run = engine.start_run("refund-priced", {}, actor="test", enqueue=False)
        run = run_inline(run.pk)
        assert run.status == Run.Status.FAILED

        plan = compute_plan(run)

    assert (plan.cost_fresh.tool_calls, Decimal(plan.cost_fresh.money)) == (1, Decimal("40"))
    assert plan.cost_resume.tool_calls == 0  # the refund is reused


# --- a stage that decides its calls as it runs (an agent's loop) ----------------------------


def _loop(ctx) -> StageOutput:
    for i in (1, 2):
        ctx.call(f"refund-{i}", "pay", amount=f"{10 * i}.00")
        ctx.call(f"look-{i}", "look", i=i)
    if ctx.run.inputs.get("fail_in_loop") == "yes":
        raise RuntimeError("the loop breaks after its calls")
    return StageOutput(outputs={})


loops = Pipeline(
    name="loop-priced",
    inputs=(Input("fail_in_loop", current=lambda inputs: "no", versioned=False),),
    tools=(
        Tool(
            "pay",
            ReplayPolicy.IDEMPOTENT,
            call=lambda args, key: {"external_id": f"rf-{args['amount']}"},
            key=lambda ctx, args: KeyParts("acct", "pay", str(ctx.run_id), args["amount"]),
            price=lambda args: Decimal(args["amount"]),
            verb="refund",
        ),
        Tool("look", ReplayPolicy.SAFE, call=lambda args, key: {"seen": args["i"]}),
    ),
    # Neither stage declares its calls, as an agent SDK's loop cannot.
    stages=(Stage("loop", _loop, tools=("pay", "look")), Stage("then", _then)),
)


def _plan_of(settings, fail_in_loop: str):
    with registered(settings, "tests.planning.test_fresh_cost.loops"):
        run = engine.start_run(
            "loop-priced", {"fail_in_loop": fail_in_loop}, actor="test", enqueue=False
        )
        run = run_inline(run.pk)
        assert run.status == Run.Status.FAILED
        return compute_plan(run)


def test_a_loops_fresh_retry_counts_the_paid_calls_it_made_without_declaring_them(settings):
    plan = _plan_of(settings, fail_in_loop="no")

    # The loop's stage is settled (the plan resumes at `then`): its paid calls are in the
    # ledger; its SAFE calls, in the log before the checkpoint, are not read for an estimate.
    assert plan.stages_reexecuted == ["then"]
    assert plan.cost_fresh.calls == {"pay": 2}
    assert Decimal(plan.cost_fresh.money) == Decimal("30")
    assert plan.cost_resume.tool_calls == 0


def test_a_loop_run_again_costs_a_fresh_retry_at_least_what_it_costs_the_resume(settings):
    plan = _plan_of(settings, fail_in_loop="yes")

    assert plan.stages_reexecuted == ["loop", "then"]
    # The resume reuses the refunds and replays the looks from the log; a fresh retry makes
    # all four again.
    assert plan.cost_resume.calls == {}
    assert plan.cost_fresh.calls == {"pay": 2, "look": 2}
    assert Decimal(plan.cost_fresh.money) == Decimal("30")

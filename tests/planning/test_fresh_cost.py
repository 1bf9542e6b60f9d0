"""What a fresh retry would spend, beside a resume's price: a call the run made is priced as
it was asked (a tool's `price=` of its arguments), not at the tool's `cost`, which is only
what a plan assumes before it knows."""

from __future__ import annotations

from decimal import Decimal

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.models import ReplayPolicy, Run
from runs.pipeline import Call, KeyParts, Pipeline, Stage, StageOutput, Tool
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

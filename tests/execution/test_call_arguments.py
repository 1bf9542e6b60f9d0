"""A stage's own call is held to its tool's `args` model before anything happens
(runs/pipeline.Tool.check_args): an amount the model refuses never reaches the ledger, a
reviewer or the target; one it accepts goes on to its confirmation as before."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.models import Effect, Event, ReplayPolicy, Run
from runs.pipeline import Input, KeyParts, Pipeline, Stage, StageOutput, Tool
from tests.support.pipelines import registered

pytestmark = pytest.mark.django_db(transaction=True)

SENT: list[dict] = []


class RefundArgs(BaseModel):
    amount: Annotated[Decimal, Field(gt=0, le=100)]


def _refund(args: dict, key: str) -> dict:
    SENT.append(args)
    return {"external_id": f"rf-{len(SENT)}"}


def _stage(ctx) -> StageOutput:
    ctx.call("refund-1", "refund", amount=ctx.inputs["amount"])
    return StageOutput(outputs={})


refunds = Pipeline(
    name="refund-args",
    inputs=(Input("amount", current=lambda pinned: "5.00", versioned=False),),
    tools=(
        Tool(
            "refund",
            ReplayPolicy.NEVER,
            call=_refund,
            key=lambda ctx, args: KeyParts("acct", "refund", str(ctx.run_id), "1"),
            args=RefundArgs,
            confirm=True,
        ),
    ),
    stages=(Stage("pay", _stage, consumes=("amount",), tools=("refund",)),),
)


def run_with(settings, amount: str) -> Run:
    with registered(settings, "tests.execution.test_call_arguments.refunds"):
        run = engine.start_run("refund-args", {"amount": amount}, actor="test", enqueue=False)
        return run_inline(run.pk)


def test_a_call_its_tools_model_refuses_fails_the_stage_with_nothing_recorded_or_sent(settings):
    SENT.clear()

    run = run_with(settings, "-5")

    assert run.status == Run.Status.FAILED
    failed = Event.objects.get(run=run, type=Event.Type.FAILED)
    assert "tool refund: the arguments do not fit its model (amount:" in failed.payload["error"]
    assert not Effect.objects.filter(run=run).exists()
    assert not Event.objects.filter(
        run=run, type__in=[Event.Type.TOOL_CALLED, Event.Type.GATE_OPENED]
    ).exists()
    assert SENT == []


def test_a_call_its_tools_model_accepts_goes_on_to_its_confirmation(settings):
    SENT.clear()

    run = run_with(settings, "5.00")

    assert run.status == Run.Status.WAITING
    assert Event.objects.filter(run=run, type=Event.Type.GATE_OPENED).count() == 1
    assert SENT == []

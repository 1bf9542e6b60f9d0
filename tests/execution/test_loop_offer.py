"""What an agent loop refuses to offer its model (runs/execution/loop_tools.py), before its
first turn asks the model anything: a function nobody made a tool, a tool without an
arguments model, one the stage may not call, and parameters the loop sets itself. The stage
fails saying how to fix it; no model call is recorded."""

from __future__ import annotations

import pytest

from runs import engine
from runs.events import read
from runs.models import Effect, Event, ReplayPolicy, Run
from runs.pipeline import Context, Input, Pipeline, Stage, StageOutput, Tool
from runs.tools.function import tool
from runs.tools.model import model_tool
from tests.support.pipelines import registered


def undeclared(city: str) -> dict:
    """Not made a tool."""
    return {"city": city}


@tool(policy=ReplayPolicy.SAFE)
def declared(city: str) -> dict:
    """Made a tool, but not this stage's."""
    return {"city": city}


SCHEMALESS = Tool("schemaless", ReplayPolicy.SAFE, call=lambda args, key: {})
WRONG = {
    "function": ([undeclared], {}),
    "no-args": (["schemaless"], {}),
    "not-the-stages": ([declared], {}),
    "params": ([], {"tools": []}),
}


def agent(ctx: Context) -> StageOutput:
    tools, params = WRONG[ctx.inputs["wrong"]]
    ctx.converse(model="script:none", task="t", tools=tools, params=params)
    return StageOutput()


offers = Pipeline(
    name="loop-offers",
    inputs=(Input("wrong", lambda pinned: "function", versioned=False),),
    tools=(model_tool("model", base_url="http://127.0.0.1:9/v1"), SCHEMALESS, declared),
    stages=(Stage("agent", agent, consumes=("wrong",), tools=("model", "schemaless")),),
)


@pytest.mark.parametrize(
    ("wrong", "said"),
    [
        ("function", "undeclared is not a tool of pipeline loop-offers: make it one with"),
        ("no-args", "tool schemaless declares no arguments model: give it args="),
        ("not-the-stages", "stage agent may not call tool 'declared': list it in its tools"),
        ("params", "converse() sets tools itself: not in params"),
    ],
)
def test_a_loop_refuses_what_it_cannot_offer_before_asking_the_model(
    transactional_db, settings, wrong, said
):
    with registered(settings, "tests.execution.test_loop_offer.offers"):
        run = engine.start_run("loop-offers", {"wrong": wrong}, actor="test", enqueue=False)
        assert engine.execute(run.pk, "agent", run.ticket, holder="worker:test") == "failed"

    failed = read(Event.objects.get(run=run, type=Event.Type.FAILED))
    assert said in failed.error
    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED
    assert not Effect.objects.filter(run=run).exists()

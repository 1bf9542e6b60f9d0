"""runs.pipeline.Context is what pipeline code may use of the context the engine hands it:
the engine's StageContext has every member, with the same parameters, and a stage run by a
real engine can use each of them."""

from __future__ import annotations

import inspect

import pytest

from runs import engine
from runs.execution.engine import StageContext
from runs.ledger.checkpoints import latest_checkpoint
from runs.models import ReplayPolicy
from runs.pipeline import Context, Input, Pipeline, Stage, StageOutput, Tool
from tests.support.pipelines import registered

MEMBERS = sorted(name for name in vars(Context) if not name.startswith("_"))


def _first(ctx: Context) -> StageOutput:
    return StageOutput(
        outputs={"missing": [name for name in MEMBERS if not hasattr(ctx, name)]},
        artifacts={"note": (b"from first", "text/plain")},
    )


def _second(ctx: Context) -> StageOutput:
    echoed = ctx.call("echo", "echo", text=ctx.upstream_artifact("first", "note").decode())
    return StageOutput(
        outputs={
            "same_run": ctx.run.public_id == ctx.run_id,
            "root_id": ctx.root_id,
            "pipeline": ctx.pipeline.name,
            "stage": ctx.stage,
            "inputs": ctx.inputs,
            "missing_upstream": ctx.upstream("first").outputs["missing"],
            "echo": echoed["text"],
        }
    )


context_pipeline = Pipeline(
    name="context-checks",
    tools=(Tool("echo", ReplayPolicy.SAFE, call=lambda args, key: {"text": args["text"]}),),
    inputs=(Input("topic", current=lambda pinned: "t1", versioned=False),),
    stages=(
        Stage("first", _first),
        Stage("second", _second, consumes=("topic",), tools=("echo",)),
    ),
)


def test_the_engine_context_has_every_member_of_the_protocol_with_its_parameters():
    assert {"run", "run_id", "root_id", "stage", "inputs", "upstream", "call"} <= set(MEMBERS)
    for name in MEMBERS:
        declared = getattr(Context, name)
        concrete = getattr(StageContext, name, None)
        if callable(declared):
            assert callable(concrete), name
            assert list(inspect.signature(concrete).parameters) == list(
                inspect.signature(declared).parameters
            ), name


@pytest.mark.django_db(transaction=True)
def test_a_stage_uses_every_member_of_the_context_it_is_handed(settings):
    with registered(settings, "tests.test_pipeline_context.context_pipeline"):
        run = engine.start_run("context-checks", {}, actor="test", enqueue=False)
        for _ in ("first", "second"):
            run.refresh_from_db()
            outcome = engine.execute(run.pk, run.current_stage, run.ticket, holder="worker:test")
            assert outcome == "verified"
        run.refresh_from_db()

    outputs = latest_checkpoint(run, "second").outputs
    assert outputs == {
        "same_run": True,
        "root_id": run.public_id,
        "pipeline": "context-checks",
        "stage": "second",
        "inputs": {"topic": "t1"},
        "missing_upstream": [],
        "echo": "from first",
    }

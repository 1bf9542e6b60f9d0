"""Small agents for the loop tests on real workers (tests/execution/test_agent_loop_hitl.py):
each one stage with ctx.converse, its model the demo service's scripted model (the model's
name is the run's input, "script:<name>"), its tools functions made tools. A worker learns of
them through RESUMER_PIPELINES, as a user's own module would be registered.

The mail goes to the demo service's outbox (settings.DEMO_SERVICE_URL, /v1/mail), which
honours the Idempotency-Key the function sends: what arrived is read from the service."""

from __future__ import annotations

from typing import Literal

import httpx
from django.conf import settings
from pydantic import BaseModel

from runs.models import ReplayPolicy
from runs.pipeline import Ask, Confirm, Context, Input, OnReject, Pipeline, Stage, StageOutput
from runs.tools.function import tool
from runs.tools.model import Price, model_tool

PATHS = tuple(
    f"tests.execution.loop_pipelines.{name}"
    for name in ("required", "reviewed", "question", "structured")
)

model = model_tool(
    "model",
    base_url=lambda: f"{settings.DEMO_SERVICE_URL}/v1",
    prices={"script:": Price("2.50", "10.00")},
    read_timeout=10,
)


@tool(policy=ReplayPolicy.SAFE)
def weather(city: str) -> dict:
    """Today's weather in a city."""
    return {"city": city, "sky": "clear"}


@tool(
    policy=ReplayPolicy.IDEMPOTENT,
    confirm=Confirm(editable=("subject", "body"), on_reject=OnReject.RETURN),
)
def send_mail(to: str, subject: str, body: str, delivery_key: str) -> dict:
    """Send an email."""
    sent = httpx.post(
        f"{settings.DEMO_SERVICE_URL}/v1/mail",
        json={"to": to, "subject": subject, "body": body},
        headers={"Idempotency-Key": delivery_key},
        trust_env=False,
        timeout=10,
    )
    sent.raise_for_status()
    return {"external_id": sent.json()["id"], "sent": True}


class Done(BaseModel):
    """Call this when the trip is planned."""

    summary: str


class Triage(BaseModel):
    label: Literal["ignore", "notify", "respond"]
    reason: str


def _stage(name: str, run, tools: tuple[str, ...] = ()) -> Pipeline:
    return Pipeline(
        name=f"loop-{name}",
        inputs=(Input("model", lambda pinned: "script:none", versioned=False),),
        tools=(model, weather, send_mail),
        stages=(Stage("agent", run, consumes=("model",), tools=("model", *tools)),),
    )


def _outputs(loop) -> StageOutput:
    output = loop.output.model_dump() if loop.output is not None else None
    return StageOutput(
        outputs={
            "final": loop.final,
            "output": output,
            "turns": loop.turns,
            "calls": [c["call"] for c in loop.tool_calls],
        }
    )


def plan_trip(ctx: Context) -> StageOutput:
    return _outputs(
        ctx.converse(
            model=ctx.inputs["model"],
            system="You plan trips.",
            task="Plan a day in Lyon.",
            tools=[weather],
            output_type=Done,
            tool_choice="required",
        )
    )


def reply(ctx: Context) -> StageOutput:
    return _outputs(
        ctx.converse(
            model=ctx.inputs["model"], task="Answer Ana's mail.", tools=[send_mail], max_turns=4
        )
    )


def ask_first(ctx: Context) -> StageOutput:
    return _outputs(
        ctx.converse(model=ctx.inputs["model"], task="Book a table.", tools=[Ask("ask_human")])
    )


def triage(ctx: Context) -> StageOutput:
    return _outputs(
        ctx.converse(model=ctx.inputs["model"], task="Triage this mail.", output_type=Triage)
    )


required = _stage("required", plan_trip, ("weather",))
reviewed = _stage("reviewed", reply, ("send_mail",))
question = _stage("question", ask_first)
structured = _stage("structured", triage)

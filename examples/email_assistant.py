"""An email assistant with a human in the loop, written the way agents are written elsewhere
(a triage, then a model loop with tools), made resumable: every model turn and every tool
call is a recorded call of the ledger, under the run's lease, and every act waits for Ana.

    triage     the model sorts the email: ignore, notify or respond (structured output,
               validated; an invalid answer is asked again)
    respond    a model loop that must call a tool every turn: it reads the calendar (SAFE),
               schedules a meeting and sends the reply (each confirmed by Ana first, who may
               edit it or reject it with feedback the model reads), asks Ana a question (the
               run waits for her answer, no worker held) and ends by calling Done

The tools are typed functions: their JSON schemas come from their signatures (pydantic), and
none is written by hand. The mail and the calendar are a JSON API (here the demo service's
/v1/mail, /v1/meetings and /v1/calendar; anything with that shape would do), the model any
OpenAI-compatible endpoint (here the demo service's scripted model, docs/demo.md):

    python -m demo_service --port 8001 &
    export PYTHONPATH=examples RESUMER_PIPELINES=email_assistant.pipeline
    export EMAIL_API_URL=http://127.0.0.1:8001 MODEL_BASE_URL=http://127.0.0.1:8001/v1
    python manage.py start_run email-assistant --input model=script:my-script \\
        --input author=bo@example.com --input subject="Tuesday?" --input body="Can we meet?"
    python manage.py work

tests/test_email_assistant.py runs it on a real worker against the scripted model.
"""

from __future__ import annotations

import os
from datetime import date
from typing import Annotated, Any, Literal

import httpx
from pydantic import BaseModel, Field

from runs.models import ReplayPolicy
from runs.pipeline import (
    Ask,
    Confirm,
    Input,
    OnReject,
    Pipeline,
    Rule,
    Stage,
    StageOutput,
    ToolRejected,
)
from runs.tools.function import tool
from runs.tools.model import model_tool

USER = "Ana Lima"
TRIAGE = f"""You triage {USER}'s email. Ignore marketing and spam, notify her of what she
should know but need not answer, and respond to what needs an answer from her."""
AGENT = f"""You are {USER}'s executive assistant. Answer the email. Read the calendar before
you schedule a meeting; ask {USER} with Question when only she can say; send the reply with
write_email. When the email has been answered, call Done."""


class Triage(BaseModel):
    """How the email is handled."""

    reasoning: str = Field(description="why, in a sentence")
    classification: Literal["ignore", "notify", "respond"]


class Done(BaseModel):
    """Call this when the email has been answered."""

    done: bool


def _api(method: str, path: str, key: str = "", **kwargs: Any) -> dict[str, Any]:
    """The mail and calendar API; its address is read in the worker, at call time."""
    url = os.environ.get("EMAIL_API_URL", "http://127.0.0.1:8001") + path
    headers = {"Idempotency-Key": key} if key else {}
    answer = httpx.request(method, url, headers=headers, timeout=10, trust_env=False, **kwargs)
    if answer.is_client_error:  # refused: nothing happened there
        raise ToolRejected(f"{method} {path} answered {answer.status_code}: {answer.text[:200]}")
    answer.raise_for_status()  # anything else: the outcome is unknown
    return answer.json()


@tool(policy=ReplayPolicy.SAFE)
def check_calendar(day: date) -> dict:
    """The meetings already on the calendar on one day."""
    return _api("GET", "/v1/calendar", params={"day": day.isoformat()})


@tool(
    policy=ReplayPolicy.IDEMPOTENT,
    confirm=Confirm(
        editable=("day", "start_time", "duration_minutes"),
        on_reject=OnReject.RETURN,
        description=f"The assistant puts this meeting in {USER}'s calendar.",
    ),
)
def schedule_meeting(
    attendees: list[str],
    subject: str,
    day: date,
    start_time: Annotated[str, Field(description="HH:MM, 24-hour clock")],
    duration_minutes: int = 30,
    delivery_key: str = "",
) -> dict:
    """Schedule a meeting and invite its attendees."""
    meeting = {"attendees": attendees, "subject": subject, "day": day.isoformat()}
    meeting |= {"start_time": start_time, "duration_minutes": duration_minutes}
    made = _api("POST", "/v1/meetings", delivery_key, json=meeting)
    return {"external_id": made["id"], "scheduled": made}


@tool(
    policy=ReplayPolicy.IDEMPOTENT,
    confirm=Confirm(
        editable=("subject", "content"),
        on_reject=OnReject.RETURN,
        description=f"The assistant sends this email as {USER}.",
    ),
)
def write_email(to: str, subject: str, content: str, delivery_key: str = "") -> dict:
    """Write the email and send it."""
    sent = _api(
        "POST", "/v1/mail", delivery_key, json={"to": to, "subject": subject, "body": content}
    )
    return {"external_id": sent["id"], "sent": True}


model = model_tool(
    "model", base_url=lambda: os.environ["MODEL_BASE_URL"], api_key_env="MODEL_API_KEY"
)


# --- the agent: what a hand-written loop took 82 lines to do --------------------------------


def email_text(ctx) -> str:
    inputs = ctx.inputs
    return f"From: {inputs['author']}\nSubject: {inputs['subject']}\n\n{inputs['body']}"


def triage(ctx) -> StageOutput:
    sorted_ = ctx.converse(
        model=ctx.inputs["model"], system=TRIAGE, task=email_text(ctx), output_type=Triage
    )
    return StageOutput(outputs=sorted_.output.model_dump())


def respond(ctx) -> StageOutput:
    if ctx.upstream("triage").outputs["classification"] != "respond":
        return StageOutput(outputs={"answered": False, "calls": []})
    loop = ctx.converse(
        model=ctx.inputs["model"],
        system=AGENT,
        task=email_text(ctx),
        tools=[check_calendar, schedule_meeting, write_email, Ask("Question")],
        output_type=Done,
        tool_choice="required",
        max_turns=12,
    )
    calls = [call["call"] for call in loop.tool_calls]
    return StageOutput(outputs={"answered": loop.output.done, "calls": calls})


# --- the pipeline --------------------------------------------------------------------------

TOOLS = ("model", "check_calendar", "schedule_meeting", "write_email")


def _text(name: str, default: str) -> Input:
    return Input(name, lambda pinned: default, versioned=False, help=f"the email's {name}")


pipeline = Pipeline(
    name="email-assistant",
    description="triage → respond: a model loop with a calendar, confirmed acts and questions",
    inputs=(
        Input("model", lambda pinned: os.environ.get("MODEL_NAME", "script:email-assistant")),
        _text("author", "bo@example.com"),
        _text("subject", "Meeting on Tuesday?"),
        _text("body", "Could we meet on Tuesday to go through the launch plan?"),
    ),
    tools=(model, check_calendar, schedule_meeting, write_email),
    stages=(
        Stage(
            "triage",
            triage,
            consumes=("model", "author", "subject", "body"),
            tools=("model",),
            rules=(Rule("triaged", lambda out: out.outputs["classification"] != ""),),
        ),
        Stage("respond", respond, consumes=("model", "author", "subject", "body"), tools=TOOLS),
    ),
)

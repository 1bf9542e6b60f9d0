"""A pipeline of a user's own, outside the demo: an email to answer as a typed input (JSON
checked against a pydantic model), a SAFE note, and a question to a human. A worker learns
of it through RESUMER_PIPELINES (PATH), as a user's own module would be registered."""

from __future__ import annotations

from pydantic import BaseModel, Field, RootModel

from runs.models import ReplayPolicy
from runs.pipeline import Call, Input, Pipeline, Stage, StageOutput, Tool

PATH = "tests.support.typed_pipeline.pipeline"


class Email(BaseModel):
    sender: str = Field(min_length=3)
    subject: str
    body: str = ""


class Labels(RootModel[list[str]]):
    """A list input: what the email is filed under."""


def _note(args: dict, key: str) -> dict:
    return {"text": f"reply to {args['to']}"}


def _reply(ctx) -> StageOutput:
    email = ctx.inputs["email"]
    note = ctx.call("note", "note", to=email["sender"])
    answer = ctx.ask("send", f"Send a reply to {email['sender']}?", details=note["text"])
    return StageOutput(
        outputs={"to": email["sender"], "labels": ctx.inputs["labels"], "said": answer}
    )


pipeline = Pipeline(
    name="mailer",
    description="answers an email a person forwards",
    inputs=(
        Input("email", schema=Email, help="the email to answer"),
        Input("labels", lambda pinned: ["inbox"], versioned=False, schema=Labels),
        Input("tone", lambda pinned: "plain", versioned=False, help="how the reply sounds"),
    ),
    tools=(Tool("note", ReplayPolicy.SAFE, _note),),
    stages=(
        Stage(
            "reply",
            _reply,
            consumes=("email", "labels", "tone"),
            tools=("note",),
            calls=(Call("note", "note"),),
            asks=("send",),
        ),
    ),
)

EMAIL = {"sender": "ana@example.com", "subject": "Lunch?", "body": "Thursday <b>noon</b>?"}

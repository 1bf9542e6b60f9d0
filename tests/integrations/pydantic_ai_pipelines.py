"""The bank support agent of examples/pydantic_ai_support.py under another declaration, for the
tests on real workers: its card block a confirmation whose reason the reviewer may edit
(`Policy(confirm=...)`). A worker learns of it through RESUMER_PIPELINES, beside the example,
as a user's own pipeline module would be registered."""

from __future__ import annotations

from pydantic_ai_support import DatabaseConn, SupportDependencies, model, support_agent

from runs.integrations.pydantic_ai import Policy, ResumerAgent
from runs.models import ReplayPolicy
from runs.pipeline import Confirm, Input, OnReject, Pipeline, Stage, StageOutput

editable = ResumerAgent(
    support_agent,
    policies={
        "customer_balance": ReplayPolicy.SAFE,
        "block_card": Policy(
            ReplayPolicy.IDEMPOTENT,
            confirm=Confirm(editable=("reason",), on_reject=OnReject.RETURN),
            verb="block the card",
        ),
    },
)


def answer(ctx) -> StageOutput:
    deps = SupportDependencies(customer_id=123, db=DatabaseConn())
    result = editable.run_sync(
        "I just lost my card!", ctx=ctx, deps=deps, model=ctx.inputs["model"]
    )
    return StageOutput(outputs=result.output.model_dump())


edits = Pipeline(
    name="bank-support-edits",
    inputs=(Input("model", lambda pinned: "script:bank-support"),),
    tools=(model, *editable.tools),
    stages=(
        Stage(
            "support",
            answer,
            consumes=("model",),
            tools=("model", *editable.tool_names),
            calls=editable.expected_calls("customer_balance", "block_card"),
        ),
    ),
)

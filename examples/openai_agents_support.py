"""A support agent written for the OpenAI Agents SDK, run as a Resumer stage: every model turn
and every tool call a recorded call of the ledger, each approval the SDK asks for a Resumer
confirmation (the gate page, the API, `manage.py answer_gate`), a crash resumed from facts.

The agent is the OpenAI Agents SDK's own "Support agent" (docs/human_in_the_loop.md, "Marking
tools that need approval", in openai/openai-agents-python), MIT License, Copyright (c) 2025
OpenAI: its tools, its approval rules and its agent are as the SDK's docs write them, but for
send_email, which now sends the email (to the demo service's outbox, under the call's delivery
key) instead of returning a string. Against the docs' code (diff): 1 line changed (send_email's
signature, to say whom to write to), 8 added to its body (the POST), 6 imports and 22 lines at
the end (a comment and 21 of code) that make it a pipeline, in place of the docs'
`while result.interruptions:` loop: Resumer's gates are that loop.

    cancel_order   needs_approval=True: always confirmed first; no policy declared, so NEVER
    send_email     needs_approval when the subject speaks of a refund; IDEMPOTENT: a retry
                   sends the same delivery key, which the outbox deduplicates

The model is any OpenAI-compatible endpoint (here the demo service's scripted model,
docs/demo.md); docs/agents.md has the rest:

    python -m demo_service --port 8001 &
    export PYTHONPATH=examples RESUMER_PIPELINES=openai_agents_support.pipeline
    export SUPPORT_API_URL=http://127.0.0.1:8001 MODEL_BASE_URL=http://127.0.0.1:8001/v1
    python manage.py start_run openai-agents-support --input model=script:my-script \\
        --input ticket="Please cancel order 42 and refund me."
    python manage.py work

tests/integrations/test_openai_agents_support.py runs it on real workers, killed and resumed.
"""

import os

import httpx
from agents import Agent
from agents.decorators import tool

from runs.integrations.openai_agents import OpenAIAgent, delivery_key
from runs.models import ReplayPolicy
from runs.pipeline import Input, Pipeline
from runs.tools.model import model_tool


@tool(needs_approval=True)
async def cancel_order(order_id: int) -> str:
    return f"Cancelled order {order_id}"


async def requires_review(_ctx, params, _call_id) -> bool:
    return "refund" in params.get("subject", "").lower()


@tool(needs_approval=requires_review)
async def send_email(to: str, subject: str, body: str) -> str:
    url = os.environ.get("SUPPORT_API_URL", "http://127.0.0.1:8001") + "/v1/mail"
    async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
        sent = await http.post(
            url,
            json={"to": to, "subject": subject, "body": body},
            headers={"Idempotency-Key": delivery_key()},
        )
    sent.raise_for_status()
    return f"Sent '{subject}'"


agent = Agent(
    name="Support agent",
    instructions="Handle tickets and ask for approval when needed.",
    tools=[cancel_order, send_email],
)


# --- Resumer: the agent as a stage (instead of the docs' `while result.interruptions:`) --------

support = OpenAIAgent(agent, policies={"send_email": ReplayPolicy.IDEMPOTENT})
model = model_tool(
    "model", base_url=lambda: os.environ["MODEL_BASE_URL"], api_key_env="MODEL_API_KEY"
)
pipeline = Pipeline(
    name="openai-agents-support",
    inputs=(
        Input("model", lambda pinned: os.environ.get("MODEL_NAME", "script:support")),
        Input("ticket", lambda pinned: "Please cancel order 42.", versioned=False),
    ),
    tools=(model, *support.tools),
    stages=(
        support.stage(
            "support",
            input=lambda ctx: ctx.inputs["ticket"],
            model=lambda ctx: ctx.inputs["model"],
            consumes=("model", "ticket"),
            calls=support.calls("turn-1", "cancel_order-1", "turn-2", "send_email-1", "turn-3"),
        ),
    ),
)

"""A small OpenAI Agents SDK agent for the adapter's tests (tests/integrations/
test_openai_agents.py): a triage agent that hands off to a billing agent, whose refund needs
approval (its amount editable), whose lookup is SAFE and whose note nobody declared (NEVER).
Its model is the demo service's scripted model, named by the run's input. The tools keep what
they did in REFUNDS and NOTES: the tests run the stage in their own process."""

from __future__ import annotations

from agents import Agent, function_tool
from django.conf import settings

from runs.integrations.openai_agents import Durable, OpenAIAgent
from runs.models import ReplayPolicy
from runs.pipeline import Confirm, Input, Pipeline, Reconciliation
from runs.tools.model import model_tool

PATH = "tests.integrations.openai_agents_pipelines.pipeline"
REFUNDS: list[tuple[int, str]] = []
NOTES: list[str] = []


@function_tool
async def lookup(order_id: int) -> dict:
    """The order, with its total."""
    return {"order_id": order_id, "total": "30.00"}


@function_tool(needs_approval=True)
async def refund(order_id: int, amount: str) -> str:
    """Refund an order."""
    REFUNDS.append((order_id, amount))
    return f"Refunded {amount} on order {order_id}"


@function_tool
async def note(text: str) -> str:
    """Note something on the customer's file."""
    NOTES.append(text)
    return "noted"


billing = Agent(name="Billing", instructions="Refund orders.", tools=[lookup, refund, note])
triage = Agent(name="Triage", instructions="Send billing questions on.", handoffs=[billing])
agent = OpenAIAgent(
    triage,
    policies={
        "lookup": Durable(ReplayPolicy.SAFE),
        "refund": Durable(ReplayPolicy.IDEMPOTENT, confirm=Confirm(editable=("amount",))),
    },
)
model = model_tool("model", base_url=lambda: f"{settings.DEMO_SERVICE_URL}/v1", read_timeout=10)


def refunding(name: str, governed: OpenAIAgent, **stage: object) -> Pipeline:
    """A pipeline whose one stage runs `governed` on a refund request, its model the one the
    run's input names (the demo service's script)."""
    return Pipeline(
        name=name,
        inputs=(Input("model", lambda pinned: "script:none", versioned=False),),
        tools=(model, *governed.tools),
        stages=(
            governed.stage(
                "agent",
                input="Please refund order 7.",
                model=lambda ctx: ctx.inputs["model"],
                consumes=("model",),
                **stage,
            ),
        ),
    )


pipeline = refunding("openai-agents-billing", agent)


# The same agent with a refund that does not deduplicate, looked up as a developer writes a
# lookup: what the payments system says, as text.
PATH_FOUND = "tests.integrations.openai_agents_pipelines.found_pipeline"


def find_refund(effect) -> Reconciliation:
    made = [amount for order, amount in REFUNDS if order == effect.request["order_id"]]
    if not made:
        return Reconciliation(found=False, detail="no refund on the order")
    order = effect.request["order_id"]
    return Reconciliation(
        found=True, external_id=f"rf-{order}", result=f"Refunded {made[-1]} on order {order}"
    )


found_agent = OpenAIAgent(
    triage,
    policies={
        "lookup": Durable(ReplayPolicy.SAFE),
        "refund": Durable(
            ReplayPolicy.RECONCILE_FIRST,
            reconcile=find_refund,
            confirm=Confirm(editable=("amount",)),
        ),
    },
)
found_pipeline = refunding("openai-agents-billing-found", found_agent)


# Instructions that say the date, read from the run's recorded clock: handed to the SDK as
# its run context, taken on the stage's thread before the agent runs.
PATH_DATED = "tests.integrations.openai_agents_pipelines.dated_pipeline"


def dated_instructions(wrapper, agent) -> str:
    return f"Today is {wrapper.context['today']}. Refund orders."


dated = Agent(name="Dated", instructions=dated_instructions, tools=[refund])
dated_agent = OpenAIAgent(
    dated, policies={"refund": Durable(ReplayPolicy.IDEMPOTENT, confirm=Confirm())}
)
dated_pipeline = refunding(
    "openai-agents-dated", dated_agent, context=lambda ctx: {"today": ctx.now().isoformat()}
)

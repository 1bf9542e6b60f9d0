"""Pydantic AI's bank support agent, run as a Resumer stage (runs/integrations/pydantic_ai/).

The agent is Pydantic AI's own example, examples/pydantic_ai_examples/bank_support.py
(https://github.com/pydantic/pydantic-ai), Copyright (c) Pydantic Services Inc. 2024 to
present, under the MIT License (https://github.com/pydantic/pydantic-ai/blob/main/LICENSE),
below as it ships with the lines Resumer needs marked "Resumer:". It gains a tool with a side
effect that waits for a person's approval, in Pydantic AI's own terms (requires_approval=True):
block_card, which tells the card team, here the demo service's outbox (a target with a state
of its own), under the call's delivery key. Then the stage: ResumerAgent wraps the agent, and
its model requests go through Resumer's model tool (here the demo service's scripted model),
its tools through the ledger with the policies declared for them; block_card's approval is a
Resumer confirmation, answered on the gate page, by the API or with `manage.py answer_gate`.

    python -m demo_service --port 8001 &
    export PYTHONPATH=examples RESUMER_PIPELINES=pydantic_ai_support.pipeline
    export SUPPORT_API_URL=http://127.0.0.1:8001 MODEL_BASE_URL=http://127.0.0.1:8001/v1
    python manage.py start_run bank-support --input model=script:my-script \\
        --input query="I just lost my card!"
    python manage.py work

tests/integrations/test_pydantic_ai_support.py runs it on real workers, kills them mid-loop and
answers its approval. The original's code is untouched (its docstring is this one): 28 lines
are added to it (23 not blank): one argument (defer_model_check), the imports, and the card
blocking tool with its call to the card system. The stage and the pipeline below it are 33
lines more. docs/agents.md, "Pydantic AI", says what each part does.
"""
# fmt: off
# Resumer: the example's own formatting is kept, so the diff with the original stays small.

import os  # Resumer  # noqa: I001 (the original keeps pydantic_ai apart)
from dataclasses import dataclass

import httpx  # Resumer
from pydantic import BaseModel, Field

from pydantic_ai import Agent, RunContext

from runs.integrations.pydantic_ai import ResumerAgent, delivery_key  # Resumer
from runs.models import ReplayPolicy  # Resumer
from runs.pipeline import Input, Pipeline, Stage, StageOutput  # Resumer
from runs.tools.model import model_tool  # Resumer


class DatabaseConn:
    """This is a fake database for example purposes.

    In reality, you'd be connecting to an external database
    (e.g. PostgreSQL) to get information about customers.
    """

    @classmethod
    async def customer_name(cls, *, id: int) -> str | None:
        if id == 123:
            return 'John'

    @classmethod
    async def customer_balance(cls, *, id: int, include_pending: bool) -> float:
        if id == 123:
            if include_pending:
                return 123.45
            else:
                return 100.00
        else:
            return 42
            # raise ValueError('Customer not found')

    @classmethod  # Resumer: the card system, a target with its own state
    async def block_card(cls, *, id: int, reason: str) -> str:
        mail = {'to': 'cards@bank.example', 'subject': f'Block card of {id}', 'body': reason}
        async with httpx.AsyncClient(trust_env=False) as client:
            answer = await client.post(
                os.environ['SUPPORT_API_URL'] + '/v1/mail', json=mail,
                headers={'Idempotency-Key': delivery_key()},  # once per call
            )
        answer.raise_for_status()
        return answer.json()['id']


@dataclass
class SupportDependencies:
    customer_id: int
    db: DatabaseConn


class SupportOutput(BaseModel):
    support_advice: str = Field(description='Advice returned to the customer')
    block_card: bool = Field(description='Whether to block their card or not')
    risk: int = Field(description='Risk level of query', ge=0, le=10)


support_agent = Agent(
    'openai:gpt-4o',
    deps_type=SupportDependencies,
    output_type=SupportOutput,
    system_prompt=(
        'You are a support agent in our bank, give the '
        'customer support and judge the risk level of their query. '
        "Reply using the customer's name."
    ),
    defer_model_check=True,  # Resumer: no OpenAI key needed to import it
)


@support_agent.system_prompt
async def add_customer_name(ctx: RunContext[SupportDependencies]) -> str:
    customer_name = await ctx.deps.db.customer_name(id=ctx.deps.customer_id)
    return f"The customer's name is {customer_name!r}"


@support_agent.tool
async def customer_balance(
    ctx: RunContext[SupportDependencies], include_pending: bool
) -> str:
    """Returns the customer's current account balance."""
    balance = await ctx.deps.db.customer_balance(
        id=ctx.deps.customer_id,
        include_pending=include_pending,
    )
    return f'${balance:.2f}'


@support_agent.tool(requires_approval=True)  # Resumer: a side effect a person approves
async def block_card(ctx: RunContext[SupportDependencies], reason: str) -> str:
    """Blocks the customer's card, telling the card team why."""
    sent = await ctx.deps.db.block_card(id=ctx.deps.customer_id, reason=reason)
    return f'Card blocked ({sent}).'


if __name__ == '__main__':
    deps = SupportDependencies(customer_id=123, db=DatabaseConn())
    result = support_agent.run_sync('What is my balance?', deps=deps)
    print(result.output)
    """
    support_advice='Hello John, your current account balance, including pending transactions, is $123.45.' block_card=False risk=1
    """

    result = support_agent.run_sync('I just lost my card!', deps=deps)
    print(result.output)
    """
    support_advice="I'm sorry to hear that, John. We are temporarily blocking your card to prevent unauthorized transactions." block_card=True risk=8
    """

# fmt: on
# --- Resumer: the agent as a stage ---------------------------------------------------------

support = ResumerAgent(
    support_agent,
    policies={"customer_balance": ReplayPolicy.SAFE, "block_card": ReplayPolicy.IDEMPOTENT},
)
model = model_tool(
    "model", base_url=lambda: os.environ["MODEL_BASE_URL"], api_key_env="MODEL_API_KEY"
)


def answer(ctx) -> StageOutput:
    deps = SupportDependencies(customer_id=int(ctx.inputs["customer_id"]), db=DatabaseConn())
    result = support.run_sync(ctx.inputs["query"], ctx=ctx, deps=deps, model=ctx.inputs["model"])
    return StageOutput(outputs=result.output.model_dump())


def _value(name: str, default: str) -> Input:
    return Input(name, lambda pinned: default, versioned=False, help=f"the customer's {name}")


pipeline = Pipeline(
    name="bank-support",
    description="Pydantic AI's bank support agent: a balance read, a card blocked on approval",
    inputs=(
        Input("model", lambda pinned: os.environ.get("MODEL_NAME", "script:bank-support")),
        _value("customer_id", "123"),
        _value("query", "I just lost my card!"),
    ),
    tools=(model, *support.tools),
    stages=(
        Stage(
            "support",
            answer,
            consumes=("model", "customer_id", "query"),
            tools=("model", *support.tool_names),
            calls=support.expected_calls("customer_balance", "block_card"),
        ),
    ),
)

"""The OpenAI Agents SDK adapter: an `agents.Agent` run by the SDK's own `Runner` inside a
stage, every model turn and every function tool call a recorded call of the ledger.

    support = OpenAIAgent(agent, policies={"send_email": ReplayPolicy.IDEMPOTENT})
    Pipeline(..., tools=(model_tool("model", ...), *support.tools),
             stages=(support.stage("support", input=lambda ctx: ctx.inputs["ticket"]),))

    model.py    the SDK's Model and ModelProvider: each turn a ctx.call of the model tool
                (chat completions), `turn-N`
    tools.py    each function tool a pipeline Tool with a declared replay policy (`Durable`;
                undeclared: NEVER), the SDK's `needs_approval` a Resumer confirmation, and the
                tool the Runner is handed, which calls it through ctx.call (`<tool>-N`)
    runner.py   `OpenAIAgent`: the tools it declares, `run(ctx, input)` and `stage(...)`

The SDK is imported here and nowhere else in runs/ (docs/agents.md).

May import: pipeline, models (the replay policies), ledger (a delivery key's digest) and
integrations (a tool's default key, its arguments' model).
"""

from runs.integrations.openai_agents.runner import OpenAIAgent
from runs.integrations.openai_agents.tools import UNDECLARED, Durable, delivery_key

__all__ = ["UNDECLARED", "Durable", "OpenAIAgent", "delivery_key"]

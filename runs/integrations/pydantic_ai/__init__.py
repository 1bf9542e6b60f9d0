"""Pydantic AI agents as Resumer stages (docs/agents.md, "Pydantic AI"): `ResumerAgent` wraps an
agent's model and function toolsets, as the SDK's own durable wrappers do, so that each model
request is a `ctx.call` of the pipeline's model tool and each tool call a `ctx.call` with the
replay policy declared for it (`Policy`; NEVER when none is), and a `requires_approval=True`
tool is a Resumer confirmation. `delivery_key()` is the call's key inside a tool's body.

The SDK (requirements-agents.txt) is imported here and nowhere else in runs/: the core runs
without it.

May import: pipeline, models, ledger (a key's digest), integrations (a tool's default key, its
arguments' model) and tools (the parameters the model tool
passes on).
"""

from runs.integrations.pydantic_ai.agent import ResumerAgent
from runs.integrations.pydantic_ai.toolset import Policy, delivery_key

__all__ = ["Policy", "ResumerAgent", "delivery_key"]

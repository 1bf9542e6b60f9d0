"""`ResumerAgent`: a Pydantic AI agent run as (part of) a Resumer stage, in the shape of the
SDK's own durable wrappers (TemporalAgent, DBOSAgent, PrefectAgent): the agent's model and
its function toolsets are wrapped, so that each model request and each tool call is a durable
step, here a `ctx.call` through Resumer's effect ledger.

    support = ResumerAgent(agent, policies={"customer_balance": ReplayPolicy.SAFE})
    Pipeline(..., tools=(model, *support.tools),
             stages=(Stage("support", answer, tools=("model", *support.tool_names)),))

    def answer(ctx):
        result = support.run_sync(prompt, ctx=ctx, deps=deps, model=ctx.inputs["model"])
        return StageOutput(outputs=result.output.model_dump())

`run_sync` runs the agent with the SDK's own run (its graph, its output validation and output
retries, its usage limits) on a thread of its own (bridge.py says why), with ResumerModel and
the ResumerToolsets in place of the agent's model and function toolsets; the tool calls of
one model answer run one after another, in the order the model gave them. The agent itself is
left as it was: outside a stage it runs as before, calling its provider.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai.agent import AbstractAgent, AgentRunResult, WrapperAgent
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from runs.integrations.pydantic_ai.bridge import Bridge
from runs.integrations.pydantic_ai.model import ResumerModel, call_id, model_name_of
from runs.integrations.pydantic_ai.toolset import Policy, ResumerToolset, pipeline_tools
from runs.models import ReplayPolicy
from runs.pipeline import Call, Context, Tool


class ResumerAgent(WrapperAgent):
    """Wrap `agent` for a stage. `policies` declares each function tool's replay policy (a
    ReplayPolicy, or a Policy with its key, reconcile, confirmation, cost); a tool it does not
    name is NEVER. `model_tool` is the pipeline's model tool (runs/tools/model.py) each
    request goes through; `call_prefix` keeps the call ids of two agents in one stage apart
    ("<prefix>.turn-1")."""

    def __init__(
        self,
        wrapped: AbstractAgent,
        *,
        policies: Mapping[str, ReplayPolicy | Policy] | None = None,
        model_tool: str = "model",
        call_prefix: str = "",
    ) -> None:
        super().__init__(wrapped)
        self.model_tool = model_tool
        self.call_prefix = call_prefix
        toolsets = list(wrapped.toolsets)
        self.tools: tuple[Tool, ...] = pipeline_tools(toolsets, policies or {})
        self._toolsets: list[AbstractToolset] = [
            toolset.visit_and_replace(self._durable) for toolset in toolsets
        ]

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The pipeline tools' names, for the stage's `tools=` (with the model tool's)."""
        return tuple(tool.name for tool in self.tools)

    def expected_calls(self, *tools: str | tuple[str, ...]) -> tuple[Call, ...]:
        """The calls of a run in which the model asks for these tools, one answer each in this
        order (a tuple: the tools one answer asks for together), then answers: the stage's
        `calls=`, so that a plan promises the loop's path (and a crash point can be named
        before a run). A resumed loop that takes another path departs from its plan:
        PLAN_DEVIATED is recorded, and a NEVER or RECONCILE_FIRST call the plan did not
        promise stops the run for a person."""
        answers = [asked if isinstance(asked, tuple) else (asked,) for asked in tools]
        unknown = sorted({t for asked in answers for t in asked} - set(self.tool_names))
        if unknown:
            raise ValueError(f"the agent has no tool {', '.join(unknown)}")
        calls, counts = [], {}
        for turn, asked in enumerate(answers, 1):
            calls.append(Call(call_id(self.call_prefix, f"turn-{turn}"), self.model_tool))
            for tool in asked:
                counts[tool] = counts.get(tool, 0) + 1
                calls.append(Call(call_id(self.call_prefix, f"{tool}-{counts[tool]}"), tool))
        last = call_id(self.call_prefix, f"turn-{len(answers) + 1}")
        return (*calls, Call(last, self.model_tool))

    def _durable(self, toolset: AbstractToolset) -> AbstractToolset:
        if isinstance(toolset, FunctionToolset):
            return ResumerToolset(toolset, prefix=self.call_prefix)
        return toolset

    def run_sync(  # type: ignore[override]
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        ctx: Context,
        model: str | None = None,
        toolsets: Sequence[AbstractToolset] | None = None,
        **kwargs: Any,
    ) -> AgentRunResult[Any]:
        """The SDK's run of the agent inside the stage `ctx`: every model request a
        `ctx.call` of the model tool with `model` (the name the model tool sends; default
        the agent's own model's name), every function tool call a `ctx.call`. The other
        keywords are the SDK's run_sync's (deps=, message_history=, output_type=, ...)."""
        if toolsets:
            raise ValueError(
                "toolsets given at run time are not declared to the pipeline: give them to "
                "the agent before wrapping it"
            )
        chat = ResumerModel(
            model or model_name_of(self.wrapped.model),
            model_tool=self.model_tool,
            prefix=self.call_prefix,
        )

        async def main() -> AgentRunResult[Any]:
            with (
                self.wrapped.override(model=chat, toolsets=self._toolsets, tools=[]),
                self.wrapped.parallel_tool_call_execution_mode("sequential"),
            ):
                return await self.wrapped.run(user_prompt, **kwargs)

        return Bridge(ctx).run(main)

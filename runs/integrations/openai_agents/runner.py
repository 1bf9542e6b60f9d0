"""`OpenAIAgent`: an agent of the OpenAI Agents SDK as the work of a stage.

    support = OpenAIAgent(agent, policies={"send_email": ReplayPolicy.IDEMPOTENT})
    support.tools          the pipeline Tools of every function tool its agents can call
    support.tool_names     what a Stage that runs it may call (the model tool first)
    support.run(ctx, input, model=...)   the SDK's Runner.run, inside the stage
    support.stage("name", input=..., model=...)   a Stage that does only that

The Runner is the SDK's own (`Runner.run`), handed a RunConfig that routes every model through
the model tool (model.py), runs a turn's tools one at a time in the order the model asked
(`ToolExecutionConfig(max_function_tool_concurrency=1)`: the ledger's order is the model's),
and turns the SDK's tracing off (it would send traces to OpenAI; Resumer's spans cover each
call). The agents are cloned for each run with governed tools (tools.py); handoffs, guardrails,
output types and tool-use behaviour are the SDK's. An agent reached only through a
`handoff(agent=...)` object is named in `agents=`, so its tools are declared with the rest.

What stops the stage (a gate opened, an outcome in doubt, a divergence) is raised from `run`
as Resumer raised it, not as the SDK wrapped it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agents import Agent, FunctionTool, Handoff, RunConfig, Runner, RunResult
from agents.run_config import ToolExecutionConfig
from asgiref.sync import async_to_sync
from pydantic_core import to_jsonable_python

from runs.integrations.openai_agents.model import TurnModels
from runs.integrations.openai_agents.session import Session, StopAgent
from runs.integrations.openai_agents.tools import Durable, governed, pipeline_tool
from runs.models import ReplayPolicy
from runs.pipeline import Call, Context, Rule, Stage, StageOutput, Tool

Given = Any  # a value, or a function of the stage's context that returns it


def _agents(start: Agent[Any], more: Iterable[Agent[Any]]) -> list[Agent[Any]]:
    """Every agent a run can reach through Agent handoffs, and those named."""
    found: dict[int, Agent[Any]] = {}
    waiting = [start, *more]
    while waiting:
        agent = waiting.pop(0)
        if id(agent) in found:
            continue
        found[id(agent)] = agent
        waiting += [h for h in agent.handoffs if isinstance(h, Agent)]
    return list(found.values())


def _function_tools(agents: list[Agent[Any]]) -> dict[str, FunctionTool]:
    tools: dict[str, FunctionTool] = {}
    for agent in agents:
        if agent.mcp_servers:
            raise TypeError(
                f"agent {agent.name}: MCP servers' tools are called outside the process: only "
                "function tools are governed in a Resumer stage"
            )
        for tool in agent.tools:
            if not isinstance(tool, FunctionTool):
                raise TypeError(
                    f"agent {agent.name}: {type(tool).__name__} {getattr(tool, 'name', '')!r} "
                    "runs outside the process (or in a sandbox): only function tools are "
                    "governed in a Resumer stage"
                )
            if tools.setdefault(tool.name, tool) is not tool:
                raise ValueError(f"two different tools are named {tool.name!r}")
    return tools


def _given(value: Given, ctx: Context) -> Any:
    return value(ctx) if callable(value) else value


class OpenAIAgent:
    """An SDK agent (with the agents it hands off to) as Resumer governs it."""

    def __init__(
        self,
        agent: Agent[Any],
        *,
        policies: Mapping[str, ReplayPolicy | Durable] | None = None,
        model_tool: str = "model",
        agents: Iterable[Agent[Any]] = (),
    ) -> None:
        self.agent = agent
        self.model_tool = model_tool
        self.agents = _agents(agent, agents)
        self.sdk_tools = _function_tools(self.agents)
        policies = dict(policies or {})
        unknown = set(policies) - set(self.sdk_tools)
        if unknown:
            raise ValueError(
                f"policies name tools no agent has: {', '.join(sorted(unknown))} "
                f"(they have: {', '.join(self.sdk_tools) or 'none'})"
            )
        self.tools: tuple[Tool, ...] = tuple(
            pipeline_tool(tool, policies.get(name)) for name, tool in self.sdk_tools.items()
        )
        self.tool_names: tuple[str, ...] = (model_tool, *self.sdk_tools)

    def run(
        self,
        ctx: Context,
        input: str | list[Any],
        *,
        model: str | None = None,
        loop_id: str = "",
        context: Any = None,
        max_turns: int = 10,
        run_config: RunConfig | None = None,
    ) -> RunResult:
        """Runner.run(agent, input) inside the stage: the model turns and tool calls through
        ctx.call. `model` names the model for every agent of the run (else each agent's own);
        `loop_id` tells two runs in one stage apart (their call ids `<loop_id>.turn-1`...)."""
        session = Session(ctx, self.model_tool, frozenset(self.sdk_tools), loop_id)
        start = _Governed(session).agent(self.agent)
        config = self._config(session, model, run_config)
        try:
            result = async_to_sync(Runner.run)(
                start, input, context=context, max_turns=max_turns, run_config=config
            )
        except BaseException as exc:
            if session.stopped is not None and session.stopped is not exc:
                raise session.stopped from None
            raise
        if session.stopped is not None:  # told to the model as a tool's failure, by the SDK
            raise session.stopped
        return result

    def _config(self, session: Session, model: str | None, given: RunConfig | None) -> RunConfig:
        default = model or (self.agent.model if isinstance(self.agent.model, str) else "")
        changes: dict[str, Any] = {
            "model_provider": TurnModels(session, default),
            "tool_execution": ToolExecutionConfig(max_function_tool_concurrency=1),
        }
        if model:
            changes["model"] = model
        if given is None:
            return RunConfig(tracing_disabled=True, **changes)
        return dataclasses.replace(given, **changes)

    def calls(self, *call_ids: str) -> tuple[Call, ...]:
        """The calls a run of the agent is expected to make, by call id ("turn-1",
        "send_email-1"), for a Stage's `calls`: what a plan lists and prices before the
        model has asked for them. A call the plan does not list is a departure from it."""
        expected = []
        for call_id in call_ids:
            name = call_id.rsplit(".", 1)[-1].rsplit("-", 1)[0]
            tool = self.model_tool if name == "turn" else name
            if tool not in self.tool_names:
                raise ValueError(f"{call_id}: no tool {tool!r} (tools: {self.tool_names})")
            expected.append(Call(call_id, tool))
        return tuple(expected)

    def stage(
        self,
        name: str,
        *,
        input: Given,
        model: Given = None,
        consumes: tuple[str, ...] = (),
        rules: tuple[Rule, ...] = (),
        calls: tuple[Call, ...] = (),
        max_turns: int = 10,
        outputs: Callable[[RunResult], dict[str, Any]] | None = None,
        context: Given = None,
    ) -> Stage:
        """A Stage that runs the agent on `input` (a value, or a function of the context) and
        outputs its final output as JSON and the agent that gave it (or `outputs(result)`).
        `calls` (self.calls(...)) are the calls a plan expects of it. `context` is the SDK's
        run context (a value, or a function of the stage's context, called on the stage's
        thread: where `ctx.now()` is read for instructions that say the date)."""

        def run(ctx: Context) -> StageOutput:
            result = self.run(
                ctx,
                _given(input, ctx),
                model=_given(model, ctx),
                max_turns=max_turns,
                context=_given(context, ctx),
            )
            if outputs is not None:
                return StageOutput(outputs=outputs(result))
            return StageOutput(
                outputs={
                    "final_output": to_jsonable_python(result.final_output),
                    "last_agent": result.last_agent.name,
                }
            )

        return Stage(name, run, consumes=consumes, tools=self.tool_names, rules=rules, calls=calls)


class _Governed:
    """The agents of one run, cloned with governed tools; a handoff's agent as it is reached
    (an agent hands off to another that hands back: each is cloned once)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.clones: dict[int, Agent[Any]] = {}

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        if id(agent) in self.clones:
            return self.clones[id(agent)]
        tools = [
            governed(self.session, t) if isinstance(t, FunctionTool) else t for t in agent.tools
        ]
        clone = agent.clone(tools=tools, handoffs=[])
        self.clones[id(agent)] = clone
        clone.handoffs = [self._handoff(h) for h in agent.handoffs]
        return clone

    def _handoff(self, handoff: Agent[Any] | Handoff[Any, Any]) -> Any:
        if isinstance(handoff, Agent):
            return self.agent(handoff)
        reach = handoff.on_invoke_handoff

        async def on_invoke_handoff(context: Any, arguments: str) -> Agent[Any]:
            return self.agent(await reach(context, arguments))

        return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)


__all__ = ["OpenAIAgent", "StopAgent"]

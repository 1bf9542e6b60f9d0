"""Durable tools: a LangChain tool whose every call is a Resumer call with a declared policy.

    @durable(ReplayPolicy.IDEMPOTENT)              # the replay policy, said by its author
    @tool
    def send_email(to: str, subject: str, body: str,
                   delivery_key: Annotated[str, InjectedToolArg] = "") -> dict:
        ...

    tools = durable_tools([search, send_email], {"search": ReplayPolicy.SAFE})  # a mapping

The result is still a LangChain `BaseTool` (the graph binds it, a ToolNode runs it, a node
may invoke it), and `.resumer` is the pipeline Tool it is called through: declare it in
Pipeline(tools=) and the stage's tools (GraphAgent.tools does). A call is
`ctx.call("<tool>-N", name, **arguments)`: its intent recorded before the tool's own code
runs (on the graph's thread, with its LangGraph config: injected state and runtime work),
its outcome after, its key the run's root, the stage, the tool and the arguments. A stage run
again gets the recorded output back; the model reads the same ToolMessage.

A tool declared without a policy is NEVER, the safest: an unknown outcome is never made again
without a person, and the plan's line says [never]. Nothing can tell from a function whether
it has a side effect. A parameter `delivery_key` marked InjectedToolArg (hidden from the
model) receives the call's delivery key, to send as an Idempotency-Key. `confirm=` makes each
first call wait for a person (runs.pipeline.Confirm); a rejection returned to the graph
(OnReject.RETURN) is the tool's output.

Not supported yet: interrupt() inside a durable tool (its intent is recorded before it runs:
ask with confirm= instead; it is refused, nothing having been sent), tools whose output is an
artifact (response_format="content_and_artifact") or a Command.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as as_tool
from langgraph.errors import GraphBubbleUp
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from runs.integrations.langgraph import bridge
from runs.ledger.chain import digest
from runs.models import ReplayPolicy
from runs.pipeline import Confirm, Context, KeyParts, Tool, ToolRejected

KEY_PARAMETER = "delivery_key"
UNDECLARED = "no replay policy declared: NEVER, the safest"
NO_INTERRUPT = (
    "{name}: interrupt() inside a durable tool is not supported (the call's intent is "
    "recorded before the tool runs); nothing was sent. Ask with durable(confirm=...) instead"
)

_tool_call_id: ContextVar[str | None] = ContextVar("resumer_langgraph_tool_call", default=None)


@dataclass(frozen=True)
class Policy:
    """What a durable tool is declared with, beside its replay policy."""

    policy: ReplayPolicy = ReplayPolicy.NEVER
    confirm: Confirm | bool | None = None
    cost: Decimal = Decimal(0)
    verb: str = "call"
    meter: str = ""
    # The target's id of what a call made, read from the tool's output (default: the key's).
    external_id: Callable[[Any], str] | None = None


class DurableTool(BaseTool):
    """A LangChain tool made through the ledger (durable() makes one)."""

    inner: BaseTool | None = None
    declared: Policy = Policy()
    # Whether a policy was said; a tool without one is NEVER, and says so.
    stated: bool = False

    @cached_property
    def resumer(self) -> Tool:
        """The pipeline tool its calls go through."""
        return _pipeline_tool(self)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        # A ToolNode hands the model's tool call: its id says which call this is (Numbering).
        called = input.get("id") if isinstance(input, dict) and input.get("type") else None
        token = _tool_call_id.set(called)
        try:
            return super().invoke(input, config, **kwargs)
        finally:
            _tool_call_id.reset(token)

    def _run(self, *args: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        kwargs.pop("run_manager", None)
        stage = bridge.current()
        if stage is None:  # outside a Resumer stage: the tool as its author wrote it
            return self.inner.invoke({**kwargs}, config)
        visible = _model_fields(self.inner)
        arguments = to_jsonable_python({k: v for k, v in kwargs.items() if k in visible})
        injected = {k: v for k, v in kwargs.items() if k not in visible and k != KEY_PARAMETER}

        def run_inner(given: dict[str, Any], key: str) -> Any:
            sent = {**given, **injected}
            if KEY_PARAMETER in _all_fields(self.inner):
                sent[KEY_PARAMETER] = key
            return self.inner.invoke(sent, config)

        call_id = stage.numbering.tool(self.name, _tool_call_id.get())

        def call() -> Any:
            stage.runner = run_inner
            return stage.ctx.call(call_id, self.name, **arguments)

        result = stage.ask(call)
        if isinstance(result, dict) and "output" in result:
            return result["output"]
        return result  # a rejection handed back as the result, or None (abandoned)


def durable(
    policy: ReplayPolicy | None = None,
    *,
    confirm: Confirm | bool | None = None,
    cost: Decimal | str = Decimal(0),
    verb: str = "call",
    meter: str = "",
    external_id: Callable[[Any], str] | None = None,
) -> Callable[[Any], DurableTool]:
    """Declare a tool's replay policy: `@durable(ReplayPolicy.IDEMPOTENT)` above `@tool` (or
    above a plain function, made a tool first), or durable(...)(a_tool). Without a policy,
    NEVER."""
    declared = Policy(
        policy or ReplayPolicy.NEVER, confirm, Decimal(cost), verb, meter, external_id
    )

    def make(given: Any) -> DurableTool:
        inner = given if isinstance(given, BaseTool) else as_tool(given)
        if isinstance(inner, DurableTool):
            raise TypeError(f"{inner.name} is durable already")
        if inner.response_format != "content":
            raise TypeError(
                f"{inner.name}: response_format={inner.response_format!r} is not "
                "supported yet: a durable tool's output is its content"
            )
        return DurableTool(
            name=inner.name,
            description=inner.description,
            args_schema=inner.args_schema,
            return_direct=inner.return_direct,
            inner=inner,
            declared=declared,
            stated=policy is not None,
        )

    return make


def durable_tools(
    tools: Sequence[Any], policies: Mapping[str, ReplayPolicy | Policy] | None = None
) -> list[DurableTool]:
    """The tools made durable, each with the policy the mapping gives its name (a
    ReplayPolicy, or a Policy with its confirmation and price); a tool the mapping does not
    name is NEVER."""
    names = [
        given.name if isinstance(given, BaseTool) else getattr(given, "__name__", "")
        for given in tools
    ]
    unknown = sorted(set(policies or {}) - set(names))
    if unknown:
        # A typo would leave the tool NEVER, silently: the other adapters refuse it too.
        raise ValueError(
            f"policies name tools the list does not have: {', '.join(unknown)} "
            f"(it has {', '.join(names) or 'none'})"
        )
    made = []
    for given, name in zip(tools, names, strict=True):
        said = (policies or {}).get(name)
        if isinstance(said, Policy):
            made.append(
                durable(
                    said.policy,
                    confirm=said.confirm,
                    cost=said.cost,
                    verb=said.verb,
                    meter=said.meter,
                    external_id=said.external_id,
                )(given)
            )
        else:
            made.append(durable(said)(given))
    return made


def _model_fields(inner: BaseTool) -> set[str]:
    """The arguments the model gives (what is recorded and keyed); the rest are injected."""
    schema = inner.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return set(schema.model_fields)
    return set((schema or {}).get("properties", {}))


def _all_fields(inner: BaseTool) -> set[str]:
    schema = inner.args_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return set(schema.model_fields)
    return set((schema or {}).get("properties", {}))


def _pipeline_tool(tool: DurableTool) -> Tool:
    declared, name = tool.declared, tool.name
    schema = tool.inner.tool_call_schema

    def key(ctx: Context, args: dict[str, Any]) -> KeyParts:
        return KeyParts(
            ctx.pipeline.name, f"langchain:{name}", f"{ctx.root_id}/{ctx.stage}", digest(args)[:32]
        )

    def call(args: dict[str, Any], delivery_key: str) -> dict[str, Any]:
        stage = bridge.current()
        runner = stage.runner if stage is not None else None
        if runner is None:
            raise RuntimeError(f"{name} is called through its graph (GraphAgent), not alone")
        try:
            output = stage.in_graph(lambda: runner(args, delivery_key))
        except GraphBubbleUp:
            raise ToolRejected(NO_INTERRUPT.format(name=name)) from None
        result: dict[str, Any] = {"output": to_jsonable_python(output)}
        if declared.policy != ReplayPolicy.SAFE:
            made = declared.external_id(output) if declared.external_id else ""
            result["external_id"] = str(made or f"{name}-{delivery_key[:16]}")
        return result

    return Tool(
        name,
        declared.policy,
        call,
        key=None if declared.policy == ReplayPolicy.SAFE else key,
        cost=declared.cost,
        meter=declared.meter,
        verb=declared.verb,
        confirm=declared.confirm,
        args=schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None,
        description=tool.description if tool.stated else f"{tool.description} ({UNDECLARED})",
    )

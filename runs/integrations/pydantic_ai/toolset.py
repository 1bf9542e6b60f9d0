"""The agent's function tools: each call a `ctx.call` with the replay policy declared for it.

A ResumerAgent finds the agent's function tools (every `FunctionToolset`, the agent's own
`@agent.tool`s among them) when it is made, and makes each a pipeline `Tool` of the same name
(`tools()` here), with the policy the `policies=` mapping declares:

    ResumerAgent(agent, policies={"customer_balance": ReplayPolicy.SAFE,
                                  "block_card": Policy(ReplayPolicy.IDEMPOTENT, verb="block")})

A tool the mapping does not name is NEVER, the safest: an outcome that is unknown is never
guessed about, and the plan says the policy was not declared (the tool's caveat). Its
delivery key, unless the Policy gives `key=`, is the run's root, the stage, the tool and the
arguments, as for runs/tools/function.py's tools. A tool declared `requires_approval=True`
(Pydantic AI's deferred approval) is a Resumer confirmation instead: the SDK is shown it as a
plain function tool, and the pipeline tool's `Confirm` holds the call before its intent until
a person answers on the gate page, the API or `manage.py answer_gate`. A rejection is told to
the model as the SDK tells a denied call, with the reviewer's reason; an edit is told with the
result, as ctx.converse() tells it.

`ResumerToolset` wraps each function toolset (the SDK's WrapperToolset): a call is
`ctx.call("<tool>-N", <tool>, **arguments)`, N counting that tool's calls in the run's messages
up to this one, and the tool's body (`call_tool` of the SDK) runs when the ledger makes the
call, in the agent's task. Its result is recorded as JSON, and the model is given the
recorded result on every attempt, so a replayed call reads as the first one did. A body that
raises ModelRetry is recorded as such ({"retry": ...}) and raised to the SDK again each time;
`delivery_key()` is the call's key inside the body (send it as Idempotency-Key).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.tools import RunContext
from pydantic_ai.tools import Tool as SDKTool
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool, WrapperToolset
from pydantic_core import to_jsonable_python

from runs.integrations.arguments import signature_model
from runs.integrations.found import shaped
from runs.integrations.keys import default_key
from runs.integrations.pydantic_ai.bridge import Bridge, current
from runs.integrations.pydantic_ai.model import call_id
from runs.models import Effect, ReplayPolicy
from runs.pipeline import Confirm, Context, KeyParts, OnReject, Reconciliation, Tool, ToolRejected

UNDECLARED = "no replay policy declared for this tool: NEVER, the safest (policies= says otherwise)"
DENIED = "The tool call was denied."

_delivery_key: ContextVar[str] = ContextVar("resumer_pydantic_ai_delivery_key", default="")


def delivery_key() -> str:
    """The delivery key of the call whose body is running ("" outside one, and for SAFE
    tools): send it as the target's Idempotency-Key."""
    return _delivery_key.get()


@dataclass(frozen=True)
class Policy:
    """What a tool's calls are to the ledger, beyond the policy: its key, how to ask the
    target (RECONCILE_FIRST), a confirmation, what a call costs and how a plan names it."""

    policy: ReplayPolicy
    key: Callable[[Context, dict[str, Any]], KeyParts] | None = None
    reconcile: Callable[[Effect], Reconciliation] | None = None
    confirm: Confirm | bool | None = None
    cost: Decimal = Decimal(0)
    meter: str = ""
    verb: str = "call"
    # What a reviewer's edit is checked against; read from the tool's signature when not given.
    args: type[BaseModel] | None = None


class ArgumentsRejected(ToolRejected):
    """Arguments (a reviewer's edit) that the tool's schema refuses: nothing was called."""


def function_tools(toolsets: list[AbstractToolset]) -> dict[str, SDKTool]:
    """The function tools of an agent's toolsets, by name."""
    found: dict[str, SDKTool] = {}

    def visit(toolset: AbstractToolset) -> None:
        if isinstance(toolset, FunctionToolset):
            found.update(toolset.tools)

    for toolset in toolsets:
        toolset.apply(visit)
    return found


def _default_key(name: str) -> Callable[[Context, dict[str, Any]], KeyParts]:
    return default_key("pydantic-ai", name)


def _call(name: str) -> Callable[[dict[str, Any], str], dict[str, Any]]:
    def call(args: dict[str, Any], key: str) -> dict[str, Any]:
        # On the stage thread, between the call's intent and its outcome: the body runs in
        # the agent's task that asked for the call.
        return current().in_agent(args, key)

    return call


def pipeline_tool(name: str, sdk_tool: SDKTool, declared: ReplayPolicy | Policy | None) -> Tool:
    """The pipeline tool for one of the agent's function tools."""
    given = declared if isinstance(declared, Policy) else Policy(declared or ReplayPolicy.NEVER)
    confirm = Confirm() if given.confirm is True else (given.confirm or None)
    if sdk_tool.requires_approval:
        # The SDK's approval, held by Resumer before the intent; a denial is the model's to
        # read, with a confirmation of the SDK's or one the Policy sets (who, what may be
        # edited): raised instead, it would fail the stage the SDK expects to go on.
        asked = confirm or Confirm(description=sdk_tool.description or "")
        confirm = replace(asked, on_reject=OnReject.RETURN)
    return Tool(
        name,
        given.policy,
        _call(name),
        key=None if given.policy == ReplayPolicy.SAFE else (given.key or _default_key(name)),
        reconcile=shaped(given.reconcile, "result"),
        cost=Decimal(given.cost),
        meter=given.meter,
        verb=given.verb,
        confirm=confirm,
        caveat=UNDECLARED if declared is None else "",
        description=sdk_tool.description or "",
        args=given.args
        or signature_model(
            name, sdk_tool.function, skip=1 if sdk_tool.takes_ctx else 0, lone_model_is_flat=True
        ),
    )


def pipeline_tools(
    toolsets: list[AbstractToolset], policies: Mapping[str, ReplayPolicy | Policy]
) -> tuple[Tool, ...]:
    found = function_tools(toolsets)
    unknown = sorted(set(policies) - set(found))
    if unknown:
        raise ValueError(
            f"policies name tools the agent does not have: {', '.join(unknown)} "
            f"(it has {', '.join(sorted(found)) or 'none'})"
        )
    return tuple(pipeline_tool(name, tool, policies.get(name)) for name, tool in found.items())


def _nth_call(ctx: RunContext, name: str) -> int:
    """Which call of `name` this is in the run's messages (1 for the first): the model's
    recorded answers fix it, so every attempt of the stage counts the same."""
    count = 0
    for message in ctx.messages:
        if not isinstance(message, ModelResponse):
            continue
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.tool_name == name:
                count += 1
                if part.tool_call_id == ctx.tool_call_id:
                    return count
    return count + 1


@dataclass
class ResumerToolset(WrapperToolset):
    """A function toolset whose every call goes through the ledger (see the module)."""

    prefix: str = ""

    async def get_tools(self, ctx: RunContext) -> dict[str, ToolsetTool]:
        tools = await super().get_tools(ctx)
        return {
            name: replace(tool, tool_def=replace(tool.tool_def, kind="function"))
            if tool.tool_def.kind == "unapproved"
            else tool
            for name, tool in tools.items()
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext, tool: ToolsetTool
    ) -> Any:
        bridge = current()
        called = call_id(self.prefix, f"{name}-{_nth_call(ctx, name)}")
        args = to_jsonable_python(tool_args)

        async def body(given: dict[str, Any], key: str) -> dict[str, Any]:
            return await self._body(name, given, key, ctx, tool)

        recorded, review = await bridge.durable(_work(bridge, called, name, args), body)
        return _told(recorded, review)

    async def _body(
        self, name: str, given: dict[str, Any], key: str, ctx: RunContext, tool: ToolsetTool
    ) -> dict[str, Any]:
        """The SDK's call of the tool, with the arguments the ledger makes it with (a
        reviewer's edit among them), its result as the JSON the ledger records."""
        try:
            validated = tool.args_validator.validate_python(given)
        except ValidationError as exc:
            raise ArgumentsRejected(f"{name}: {exc.errors(include_url=False)}") from None
        token = _delivery_key.set(key)
        try:
            result = {
                "result": to_jsonable_python(
                    await self.wrapped.call_tool(name, validated, ctx, tool)
                )
            }
        except ModelRetry as exc:
            result = {"retry": exc.message}
        finally:
            _delivery_key.reset(token)
        # The ledger names each effect by the target's id; a function has none of its own.
        return {**result, "external_id": f"{name}-{key[:16]}"} if key else result


def _work(bridge: Bridge, called: str, name: str, args: dict[str, Any]) -> Callable[[], Any]:
    def work() -> tuple[Any, Any]:  # on the stage thread
        return bridge.ctx.call(called, name, **args), bridge.ctx.review(called)

    return work


def _told(recorded: Any, review: Any) -> Any:
    """What the model is told a call came to: its recorded result, a denial with the
    reviewer's reason, a retry asked for, or the result with what the reviewer changed."""
    if not isinstance(recorded, dict):
        return recorded  # None: a call a supervisor abandoned
    if recorded.get("rejected") and "result" not in recorded:
        reason = recorded.get("reason") or ""
        return f"{DENIED} {reason}".strip() if reason else DENIED
    if "retry" in recorded and "result" not in recorded:
        raise ModelRetry(recorded["retry"])
    # A call a supervisor confirmed by hand: its external id is all that is known.
    result = recorded.get("result") if "result" in recorded else _only_id(recorded)
    if review is not None and review.edits:
        edits = {name: {"asked": was, "sent": now} for name, (was, now) in review.edits.items()}
        reviewer: dict[str, Any] = {"by": review.by, "edited": edits}
        if review.reason:
            reviewer["notes"] = review.reason
        return {"result": result, "reviewer": reviewer}
    return result


def _only_id(recorded: dict[str, Any]) -> dict[str, Any]:
    return {"external_id": recorded.get("external_id", "")}

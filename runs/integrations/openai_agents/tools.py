"""The SDK's function tools, governed: each one a pipeline `Tool` with the replay policy its
author declared, and, for the Runner, a copy of it that makes every call through ctx.call.

    policies={"send_email": ReplayPolicy.IDEMPOTENT,
              "lookup": Durable(ReplayPolicy.SAFE),
              "refund": Durable(ReplayPolicy.RECONCILE_FIRST, reconcile=find_refund)}

Nothing can tell from a function whether it has a side effect, so a tool nobody declared is
NEVER, the safest: an outcome in doubt is never re-run without a human, and the plan says the
policy was not declared (UNDECLARED, the tool's caveat). Its delivery key is the run's root,
the stage, the tool and its arguments unless `Durable(key=)` says otherwise; the tool's body
reads it with `delivery_key()` to send as an Idempotency-Key.

`needs_approval` (True, or the SDK's callable of the run context, the arguments and the call
id) becomes a Resumer confirmation of the call: the gate opens before its intent, the run
waits with no worker, and the answer (on the gate page, the API or `manage.py answer_gate`)
queues the stage again, whose Runner finds every earlier call recorded. An approval makes the
call (an edit, with the edited arguments, told to the model); a rejection is the tool's result,
as the SDK words it, with the reviewer's reason. The SDK itself never interrupts the run.

A call's body runs as the SDK would run it (its argument checks, its context), with its errors
raised rather than told to the model, so the ledger records what happened: a refusal
(`ToolRejected`, or arguments the tool's schema refuses: nothing happened) is then told to the
model as the SDK tells a failed tool, anything else leaves the outcome unknown.
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import json
import typing
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.exceptions import ModelBehaviorError
from agents.tool import (
    maybe_invoke_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)
from agents.tool_context import ToolContext
from asgiref.sync import async_to_sync, sync_to_async
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from runs.integrations.arguments import signature_model
from runs.integrations.found import shaped
from runs.integrations.keys import default_key
from runs.integrations.openai_agents.session import Session
from runs.models import Effect, ReplayPolicy
from runs.pipeline import (
    Confirm,
    Context,
    KeyParts,
    OnReject,
    Reconciliation,
    Tool,
    ToolRejected,
)

UNDECLARED = "no replay policy declared for this tool: NEVER, the safest (never re-run unasked)"
# The SDK's words for a call whose approval was refused (agents.tool's default), with who.
NOT_APPROVED = "Tool execution was not approved."


@dataclass(frozen=True)
class Durable:
    """How one SDK tool is governed: its replay policy and what the policy needs (a key for
    every policy but SAFE, a reconcile lookup for RECONCILE_FIRST), how a confirmation of a
    `needs_approval` call is asked (`confirm`: its role, editable arguments, limits; its
    `when` is the SDK's), and what the plan says of it."""

    policy: ReplayPolicy = ReplayPolicy.NEVER
    key: Callable[[Context, dict[str, Any]], KeyParts] | None = None
    reconcile: Callable[[Effect], Reconciliation] | None = None
    confirm: Confirm | None = None
    cost: Decimal = Decimal(0)
    meter: str = ""
    verb: str = "call"
    # What a reviewer's edit is checked against (the tool's own constraints): the SDK's
    # FunctionTool keeps only a JSON schema, so its arguments' model is given here.
    args: type[BaseModel] | None = None


@dataclass(frozen=True)
class _Invocation:
    """The SDK's invocation a durable call is made for: what its Tool.call and its
    confirmation read (a context variable: ctx.call knows only the arguments)."""

    context: ToolContext[Any]
    needs_approval: bool


_INVOCATION: contextvars.ContextVar[_Invocation | None] = contextvars.ContextVar(
    "openai_agents_invocation", default=None
)
_KEY: contextvars.ContextVar[str] = contextvars.ContextVar("openai_agents_key", default="")


def delivery_key() -> str:
    """The delivery key of the tool call being made ("" outside one): what a tool's body
    sends as its Idempotency-Key, so a retry under the same key is the same delivery."""
    return _KEY.get()


def declared(value: ReplayPolicy | Durable | None) -> tuple[Durable, str]:
    """A tool's declaration and its caveat ("" for a declared one)."""
    if value is None:
        return Durable(), UNDECLARED
    if isinstance(value, Durable):
        return value, ""
    return Durable(ReplayPolicy(value)), ""


def _default_key(name: str) -> Callable[[Context, dict[str, Any]], KeyParts]:
    return default_key("openai-agents", name)


def _approval_needed(ctx: Context, args: dict[str, Any]) -> bool:
    invocation = _INVOCATION.get()
    return True if invocation is None else invocation.needs_approval


def _confirmation(sdk_tool: FunctionTool, durable: Durable) -> Confirm | None:
    if sdk_tool.needs_approval is False:
        if durable.confirm is None:
            return None
        # Declared on the tool's Durable without the SDK's needs_approval: every call is
        # confirmed, as durable(confirm=) does for LangGraph; a rejection is the model's.
        return dataclasses.replace(durable.confirm, on_reject=OnReject.RETURN)
    asked = durable.confirm or Confirm(
        description=f"The agent's tool **{sdk_tool.name}**: {sdk_tool.description}"
    )
    # The SDK decides which calls need approval; a rejection is told to the model.
    return dataclasses.replace(asked, when=_approval_needed, on_reject=OnReject.RETURN)


def _raising(sdk_tool: FunctionTool) -> FunctionTool:
    """The tool as the SDK runs it, its errors raised instead of told to the model."""
    return set_function_tool_failure_error_function(dataclasses.replace(sdk_tool), None)


def _caller(sdk_tool: FunctionTool, policy: ReplayPolicy) -> Callable[[dict, str], dict]:
    raising = _raising(sdk_tool)
    name = sdk_tool.name

    def call(args: dict[str, Any], key: str) -> dict[str, Any]:
        invocation = _INVOCATION.get()
        if invocation is None:
            raise ToolRejected(f"{name} is an agent's tool: its agent's run calls it")
        token = _KEY.set(key)
        try:
            output = async_to_sync(raising.on_invoke_tool)(invocation.context, json.dumps(args))
        except ModelBehaviorError as exc:  # the arguments do not fit: nothing was called
            raise ToolRejected(str(exc)) from exc
        finally:
            _KEY.reset(token)
        result: dict[str, Any] = {"output": to_jsonable_python(output)}
        if policy != ReplayPolicy.SAFE:
            # The ledger names each effect by the target's id; the SDK's tool has none.
            result["external_id"] = f"{name}-{key[:16]}"
        return result

    return call


def pipeline_tool(sdk_tool: FunctionTool, value: ReplayPolicy | Durable | None) -> Tool:
    """The pipeline Tool behind one SDK function tool."""
    durable, caveat = declared(value)
    safe = durable.policy == ReplayPolicy.SAFE
    return Tool(
        sdk_tool.name,
        durable.policy,
        _caller(sdk_tool, durable.policy),
        key=None if safe else (durable.key or _default_key(sdk_tool.name)),
        reconcile=shaped(durable.reconcile, "output"),
        cost=Decimal(durable.cost),
        meter=durable.meter,
        verb=durable.verb,
        confirm=_confirmation(sdk_tool, durable),
        caveat=caveat,
        description=sdk_tool.description,
        args=durable.args or arguments_model(sdk_tool),
    )


def arguments_model(sdk_tool: FunctionTool) -> type[BaseModel] | None:
    """The arguments' model of a tool `function_tool` made, read from the function it wraps
    (the SDK keeps it as `__wrapped__`) as the SDK reads the signature: a first parameter
    that is the run's context is not an argument. None for a FunctionTool built by hand (a
    JSON schema only): its edits are then typed by the value the model proposed."""
    function = getattr(sdk_tool, "__wrapped__", None)
    if function is None:
        return None
    try:
        first = next(iter(inspect.signature(function).parameters.values()), None)
        hint = typing.get_type_hints(function).get(first.name) if first is not None else None
    except (NameError, TypeError, ValueError):
        return None
    context = typing.get_origin(hint) or hint
    takes_context = isinstance(context, type) and issubclass(context, RunContextWrapper)
    return signature_model(sdk_tool.name, function, skip=1 if takes_context else 0)


async def _needs_approval(sdk_tool: FunctionTool, context: ToolContext[Any], args: Any) -> bool:
    rule = sdk_tool.needs_approval
    if not callable(rule):
        return bool(rule)
    if not isinstance(args, dict):
        return True  # the SDK's rule: arguments it cannot inspect need approval
    said = rule(context, args, context.tool_call_id)
    return bool(await said) if inspect.isawaitable(said) else bool(said)


def governed(session: Session, sdk_tool: FunctionTool) -> FunctionTool:
    """The copy of an SDK tool the Runner is handed for one run: each call through
    ctx.call, under its call id; approval asked by Resumer, not by the SDK."""
    name = sdk_tool.name

    async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> Any:
        call_id = session.call_id_of(name, context.tool_call_id)
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            return f"The arguments for {name} are not JSON; nothing was done. Call it again."
        needs = await _needs_approval(sdk_tool, context, args)
        token = _INVOCATION.set(_Invocation(context, needs))
        try:
            made = await sync_to_async(_made, thread_sensitive=True)(session, call_id, name, args)
        except ToolRejected as exc:
            told = await maybe_invoke_function_tool_failure_error_function(
                function_tool=sdk_tool, context=context, error=exc
            )
            if told is None:
                raise
            return told
        finally:
            _INVOCATION.reset(token)
        return made

    return dataclasses.replace(sdk_tool, on_invoke_tool=on_invoke_tool, needs_approval=False)


def _made(session: Session, call_id: str, name: str, args: dict[str, Any]) -> Any:
    """The call, on the stage's thread, and what the model is told of it: the tool's output;
    a rejection in the SDK's words with the reviewer's reason; a reviewer's edit beside the
    output, so the model knows what was done."""
    result = session.call(call_id, name, args, refusable=True)
    if not isinstance(result, dict):
        return result  # abandoned by a supervisor: None
    if result.get("rejected"):
        reason = result.get("reason") or "no reason given"
        return f"{NOT_APPROVED} Rejected by {result.get('by')}: {reason}"
    # A call a supervisor confirmed by hand: its external id is all that is known.
    output = result["output"] if "output" in result else {"external_id": result.get("external_id")}
    review = session.ctx.review(call_id)
    if review is not None and review.edits:
        edited = {arg: {"asked": was, "sent": now} for arg, (was, now) in review.edits.items()}
        output = {"output": output, "reviewer": {"by": review.by, "edited": edited}}
    # As JSON text with its keys sorted: a result handed back from the ledger (PostgreSQL's
    # jsonb orders an object's keys its own way) tells the model what the live one told it,
    # so the next turn's request is the one recorded.
    return output if isinstance(output, str) else json.dumps(output, sort_keys=True)

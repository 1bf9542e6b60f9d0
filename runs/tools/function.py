"""Tools from typed Python functions: what an agent loop offers its model, with no JSON schema
written by hand.

    @tool(policy=ReplayPolicy.SAFE)
    def check_calendar(day: date) -> list[Meeting]:
        \"\"\"The meetings on one day of the calendar.\"\"\"
        ...

    Pipeline(..., tools=(check_calendar, ...), stages=(Stage(..., tools=("check_calendar",)),))
    ctx.converse(..., tools=[check_calendar])          # or ctx.call("day", "check_calendar", ...)

The result is a runs.pipeline.Tool (a `FunctionTool`, still callable as the function), so the
engine, the planner and the gates know it like any other. Its arguments' model (pydantic:
`Tool.args`, what the loop offers the model as the tool's parameters and what a reviewer's
edit is checked against) is made from the signature: each parameter's type hint and default,
`Annotated[str, Field(description=...)]` to describe one, arguments it does not name refused.
The tool's description is the function's docstring. A parameter named `delivery_key` is not
the model's: it receives the call's delivery key, to send as an Idempotency-Key.

The replay policy is the author's to say: nothing can tell from a function whether it has a
side effect. Declared without one, a function tool is NEVER, the safest: a call whose outcome
is unknown (the function raised) is never made again without a human. Its delivery key,
unless `key=` says otherwise, is the run's root, the stage, the tool and the arguments: the
same arguments in the same stage are the same delivery. A function that raises ToolRejected
says that nothing happened; arguments that do not validate are refused the same way.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_core import PydanticUndefined, to_jsonable_python

from runs.ledger.chain import digest
from runs.models import Effect, ReplayPolicy
from runs.pipeline import Confirm, Context, KeyParts, Reconciliation, Tool, ToolRejected

# The parameter that receives the delivery key rather than a value from the model.
KEY_PARAMETER = "delivery_key"


class ArgumentsRejected(ToolRejected):
    """The arguments do not fit the function's signature: nothing was called."""


@dataclass(frozen=True)
class FunctionTool(Tool):
    """A Tool made by tool() from a function; calling it calls the function."""

    function: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


def validation_errors(exc: ValidationError) -> str:
    """A validation error as a model (or a person) reads it: each wrong place and why, in a
    fixed order and with no link in it, so the same error is the same text every time."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'the answer'}: {error['msg']}"
        for error in exc.errors(include_url=False)
    )


def arguments_model(function: Callable[..., Any], name: str) -> type[BaseModel]:
    """The function's parameters as a pydantic model (its docstring the model's)."""
    hints = typing.get_type_hints(function, include_extras=True)
    fields: dict[str, Any] = {}
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name}: *args and **kwargs cannot be offered to a model")
        if param.name == KEY_PARAMETER:
            continue
        default = PydanticUndefined if param.default is param.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    return create_model(
        name,
        __config__=ConfigDict(extra="forbid"),
        __doc__=inspect.getdoc(function) or None,
        **fields,
    )


def _default_key(name: str) -> Callable[[Context, dict[str, Any]], KeyParts]:
    def key(ctx: Context, args: dict[str, Any]) -> KeyParts:
        return KeyParts(
            ctx.pipeline.name, f"function:{name}", f"{ctx.root_id}/{ctx.stage}", digest(args)[:32]
        )

    return key


def _caller(
    function: Callable[..., Any], model: type[BaseModel], name: str, policy: ReplayPolicy
) -> Callable[[dict[str, Any], str], dict[str, Any]]:
    takes_key = KEY_PARAMETER in inspect.signature(function).parameters

    def call(args: dict[str, Any], key: str) -> dict[str, Any]:
        try:
            parsed = model.model_validate(args)
        except ValidationError as exc:
            raise ArgumentsRejected(f"{name}: {validation_errors(exc)}") from None
        values = {field: getattr(parsed, field) for field in type(parsed).model_fields}
        if takes_key:
            values[KEY_PARAMETER] = key
        result = to_jsonable_python(function(**values))
        if not isinstance(result, dict):
            result = {"result": result}
        if policy != ReplayPolicy.SAFE and "external_id" not in result:
            # The ledger names each effect by the target's id; a function has none of its own.
            result = {**result, "external_id": f"{name}-{key[:16]}"}
        return result

    return call


def tool(
    function: Callable[..., Any] | None = None,
    *,
    policy: ReplayPolicy = ReplayPolicy.NEVER,
    name: str = "",
    key: Callable[[Context, dict[str, Any]], KeyParts] | None = None,
    reconcile: Callable[[Effect], Reconciliation] | None = None,
    confirm: Confirm | bool | None = None,
    cost: Decimal = Decimal(0),
    meter: str = "",
    verb: str = "call",
    description: str = "",
) -> Any:
    """Make a function a pipeline tool: `@tool(policy=ReplayPolicy.SAFE)` above it, or
    `tool(fn, policy=...)`. Without `policy`, NEVER (see the module's docstring)."""

    def make(fn: Callable[..., Any]) -> FunctionTool:
        called = name or fn.__name__
        model = arguments_model(fn, called)
        return FunctionTool(
            called,
            policy,
            _caller(fn, model, called, policy),
            key=None if policy == ReplayPolicy.SAFE else (key or _default_key(called)),
            reconcile=reconcile,
            cost=Decimal(cost),
            meter=meter,
            verb=verb,
            confirm=confirm,
            args=model,
            description=description or inspect.getdoc(fn) or "",
            function=fn,
        )

    return make(function) if function is not None else make

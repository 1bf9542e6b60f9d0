"""The arguments' model of an adapted agent's tool, read from its function's signature: what
a reviewer's edit is checked against before anything is recorded (runs/gates/arguments.py),
as a pipeline's own tool declares it with `args`. The SDK checks the arguments its model
proposes; an edit reaches the tool only through the ledger, so without this model an edit was
checked by type alone, and a value the tool refuses (an amount of -5 where the signature says
gt=0) was recorded as the answer and then failed the stage.

pydantic builds the model (`create_model`) from the same annotations the SDK reads, its
`Annotated[..., Field(...)]` constraints included; a signature it cannot express as one
(`*args`, positional-only or private parameters, a type pydantic has no schema for) gives
None, and edits are then checked by type, as before.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, PydanticUserError, create_model

__all__ = ["signature_model"]

_UNMODELLED = (
    inspect.Parameter.VAR_POSITIONAL,
    inspect.Parameter.VAR_KEYWORD,
    inspect.Parameter.POSITIONAL_ONLY,
)


def signature_model(
    name: str, function: Callable[..., Any], *, skip: int = 0, lone_model_is_flat: bool = False
) -> type[BaseModel] | None:
    """A model of `function`'s parameters after the first `skip` (a context the SDK passes),
    named for the tool. `lone_model_is_flat`: the SDK takes a lone pydantic parameter's
    fields as the tool's arguments (pydantic-ai does), so that model is the arguments'."""
    try:
        hints = typing.get_type_hints(function, include_extras=True)
        params = list(inspect.signature(function).parameters.values())[skip:]
    except (NameError, TypeError, ValueError):  # an annotation that does not resolve
        return None
    if lone_model_is_flat and len(params) == 1:
        lone = hints.get(params[0].name)
        if isinstance(lone, type) and issubclass(lone, BaseModel):
            return lone
    fields: dict[str, Any] = {}
    for param in params:
        if param.kind in _UNMODELLED or param.name.startswith("_"):
            return None
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    try:
        return create_model(f"{name}_arguments", **fields)
    except (PydanticUserError, TypeError, ValueError):
        return None

"""A pipeline's inputs (runs.pipeline names them): what a run pins when it starts. An input is a
version read from a source as the run starts (`facts` = `v3`, compared with the source's
current one for drift), a value (`versioned=False`: given, or `current()`'s default, never
drift), or JSON checked against a pydantic model (`schema=`). Every face starts a run through
`Pipeline.resolve_inputs`, so a bad value is refused the same way everywhere, naming the
input, before anything is written."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pydantic is loaded by a pipeline that declares a model, not at start
    from pydantic import BaseModel


class InvalidInput(ValueError):
    """A run cannot start with these inputs; `input` names the one at fault ("" for none)."""

    def __init__(self, message: str, *, input: str = "") -> None:
        super().__init__(message)
        self.input = input


# A typed input's JSON, at most: it is pinned on the run and on each event of its stages.
MAX_INPUT_BYTES = 64 * 1024
# An input's text, at most, as a person or a client types it (a version, a topic): one bound
# on the start page and in the API; a longer value is a typed input's JSON.
MAX_TEXT_CHARS = 2000


@dataclass(frozen=True)
class Input:
    """An input a run pins when it starts: a version read from a source (`facts` = `v3`), a
    value (`versioned=False`), or JSON checked against a pydantic model (`schema=`)."""

    name: str
    # current(inputs) -> the version (or value) a new run gets when none is given; None: the
    # input must be given.
    current: Callable[[dict[str, Any]], Any] | None = None
    # validate(value, inputs) raises InvalidInput when a given version does not exist.
    validate: Callable[[Any, dict[str, Any]], None] | None = None
    # A versioned input whose source moves on shows as drift; a value never does.
    versioned: bool = True
    help: str = ""
    # A pydantic model (a RootModel for a list): the input is JSON (given as such, or as its
    # text), validated when the run starts and pinned as the model dumps it.
    schema: type[BaseModel] | None = None

    def pin(self, value: Any, known: dict[str, Any], *, given: bool = True) -> Any:
        """The value a run pins: text as it is (a version), typed JSON as its schema dumps
        it. Raises InvalidInput naming the input."""
        if self.schema is not None:
            value = self._typed(value)
        elif given and not isinstance(value, str):
            raise InvalidInput(
                f"input {self.name} is text, not {type(value).__name__}", input=self.name
            )
        if given and self.validate is not None:
            try:
                self.validate(value, known)
            except InvalidInput as exc:
                if exc.input:
                    raise
                # A pipeline's validator that did not say which input: this one.
                raise InvalidInput(str(exc), input=self.name) from None
        return value if self.schema is not None else str(value)

    def _typed(self, value: Any) -> Any:
        label = f"input {self.name} ({self.schema.__name__})"
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise InvalidInput(f"{label} must be JSON: {exc}", input=self.name) from None
        try:
            pinned = self.schema.model_validate(value).model_dump(mode="json")
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise InvalidInput(f"{label} does not fit: {errors_of(exc)}", input=self.name) from None
        if len(json.dumps(pinned, ensure_ascii=False).encode()) > MAX_INPUT_BYTES:
            raise InvalidInput(f"{label} is over {MAX_INPUT_BYTES} bytes", input=self.name)
        return pinned


def errors_of(exc: ValueError) -> str:
    """A pydantic validation error as one line: where and what, for the first few problems."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    said = [
        f"{'.'.join(str(part) for part in error['loc']) or 'the value'}: {error['msg']}"
        for error in errors()[:5]
    ]
    return "; ".join(said)

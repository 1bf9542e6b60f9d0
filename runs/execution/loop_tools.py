"""What an agent loop offers its model (agent_loop.py): each tool's name, description and
parameters as the chat API takes them, built from what the stage passes to converse(tools=):

    "name" or a Tool ........ a tool of the pipeline the stage may call: its `args` model is
                              its parameters, its `description` (else the model's docstring)
                              what the model reads; a call goes through ctx.call
    a function .............. the pipeline tool runs.tools.function.tool() made of it
    Ask(...) ................ a question to a human: a gate, whose answer is the result
    {"name": schema} ........ the older form: pipeline tools with their schemas given by hand

and, for the loop's end, the final-answer tool (under tool_choice="required") or the
response format that asks for `output_type` as JSON. Nothing here calls anything; the schemas
are pydantic's, the same for the same declaration every time, so a turn's request (its key)
does not change between attempts.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runs.pipeline import Ask, Context, Tool

REQUIRED = "required"


class FinalAnswer(BaseModel):
    """Give your final answer. Calling this ends the conversation."""

    model_config = ConfigDict(extra="forbid")

    answer: str = Field(description="the answer, in full")


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(description="the question, with what the human needs to answer it")


@dataclass(frozen=True)
class Offered:
    """One tool the model may call: its schema, and what a call of it does."""

    name: str
    description: str
    parameters: dict[str, Any]
    # The pipeline tool a call goes to ("" for a question or the final answer).
    tool: str = ""
    # What its arguments are checked with before anything is called (None: not checked here).
    args: type[BaseModel] | None = None
    ask: Ask | None = None
    # The final-answer tool: its arguments are the loop's output.
    output: type[BaseModel] | None = None

    def schema(self) -> dict[str, Any]:
        function = {"name": self.name, "parameters": self.parameters}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


@dataclass
class Offer:
    """Every tool of one loop, by name, in the order offered."""

    tools: dict[str, Offered] = field(default_factory=dict)
    # The final-answer tool's name ("": the loop ends on an answer without tool calls).
    final: str = ""

    def add(self, offered: Offered) -> None:
        if offered.name in self.tools:
            raise ValueError(f"the loop offers two tools named {offered.name!r}")
        self.tools[offered.name] = offered

    def schemas(self) -> list[dict[str, Any]]:
        return [offered.schema() for offered in self.tools.values()]


def parameters_of(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema as a tool's parameters: its title and docstring are the tool's
    name and description, said once."""
    schema = model.model_json_schema()
    return {k: v for k, v in schema.items() if k not in ("title", "description")}


def describe(model: type[BaseModel]) -> str:
    return inspect.cleandoc(model.__doc__ or "")


def offer(
    ctx: Context,
    tools: Any,
    output_type: type[BaseModel] | None,
    tool_choice: str | None,
) -> Offer:
    """The loop's tools, checked before its first turn: each one a tool this stage may call
    (or a question), and under tool_choice="required" the final-answer tool."""
    made = Offer()
    if isinstance(tools, Mapping):
        for name, schema in tools.items():
            made.add(
                Offered(name, schema.get("description", ""), schema.get("parameters", {}), name)
            )
    else:
        for item in tools or ():
            made.add(_offered(ctx, item))
    if tool_choice == REQUIRED:
        # A model that must call a tool every turn ends by calling this one.
        final = output_type or FinalAnswer
        name = final.__name__ if output_type is not None else "final_answer"
        made.add(Offered(name, describe(final), parameters_of(final), output=final))
        made.final = name
    return made


def response_format(output_type: type[BaseModel]) -> dict[str, Any]:
    """The chat API's structured output: the answer as JSON of the output model's schema."""
    return {
        "type": "json_schema",
        "json_schema": {"name": output_type.__name__, "schema": output_type.model_json_schema()},
    }


def _offered(ctx: Context, item: Any) -> Offered:
    if isinstance(item, Ask):
        return Offered(
            item.name, item.description, parameters_of(Question), args=Question, ask=item
        )
    if isinstance(item, str):
        return _pipeline_tool(ctx, item)
    if isinstance(item, Tool):
        return _pipeline_tool(ctx, item.name)
    if callable(item):
        return _pipeline_tool(ctx, _wrapping(ctx, item))
    raise TypeError(
        f"a loop's tool is a tool's name, a Tool, a function made a tool, or an Ask: not {item!r}"
    )


def _wrapping(ctx: Context, function: Callable[..., Any]) -> str:
    """The name of the pipeline tool made of this function (runs.tools.function.tool)."""
    for declared in ctx.pipeline.tools:
        if getattr(declared, "function", None) is function:
            return declared.name
    name = getattr(function, "__name__", repr(function))
    raise ValueError(
        f"{name} is not a tool of pipeline {ctx.pipeline.name}: make it one with "
        "runs.tools.function.tool (saying its replay policy), list it in Pipeline(tools=) "
        "and in this stage's tools"
    )


def _pipeline_tool(ctx: Context, name: str) -> Offered:
    if name not in ctx.pipeline.stage(ctx.stage).tools:
        raise ValueError(f"stage {ctx.stage} may not call tool {name!r}: list it in its tools")
    declared = ctx.pipeline.tool(name)
    if declared.args is None:
        raise ValueError(
            f"tool {name} declares no arguments model: give it args= (a pydantic model), or "
            f"offer it as {{{name!r}: its JSON schema}}"
        )
    description = declared.description or describe(declared.args)
    return Offered(name, description, parameters_of(declared.args), name, declared.args)

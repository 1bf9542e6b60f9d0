"""ChatResumer: a LangChain chat model whose every answer is a Resumer model call.

    llm = ChatResumer(model="gpt-5-nano")          # where the graph had ChatOpenAI(...)

It is a `BaseChatModel` (LangChain's extension point for a chat model: `_generate`, and
`bind_tools` for tools and structured output), so a graph uses it as it used its own: invoke,
bind_tools, with_structured_output (asked as a tool call). Each `_generate` is one
`ctx.call("turn-N", <model tool>, model=..., messages=[...], **params)`: the LangChain
messages turned into chat-completions messages (langchain-core's own conversion), the answer
turned back into an AIMessage with its tool calls and usage. So the turn is recorded, keyed
by its conversation, priced and never billed again on resume: a stage run again gets the
recorded answer back for the same request, and a request that differs is a divergence.

Nothing in a request depends on the clock or on chance (no message ids, no run ids), so the
same graph asks the same requests on every attempt. Outside a Resumer stage there is no
ledger to call through: it raises, and the graph's own chat model is the one to run bare.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.openai_tools import make_invalid_tool_call, parse_tool_call
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import (
    convert_to_openai_function,
    convert_to_openai_tool,
)
from pydantic import BaseModel, Field

from runs.integrations.langgraph import bridge
from runs.tools.model import PARAMETERS

OUTSIDE = (
    "ChatResumer answers inside a Resumer stage only (GraphAgent.invoke): outside one, run "
    "the graph with the SDK's own chat model"
)
# What tool_choice LangChain says, in the chat API's words.
TOOL_CHOICES = {"any": "required", True: "required"}


class ChatResumer(BaseChatModel):
    """A chat model answered through the stage's model tool (runs/tools/model.py)."""

    # The model as the graph declares it; the stage may ask another (GraphAgent.invoke).
    model: str = ""
    # The pipeline's model tool each turn is a call of.
    model_tool: str = "model"
    temperature: float | None = None
    max_tokens: int | None = None
    # Any other chat-completions parameter the model tool passes on (runs/tools/model.py).
    model_kwargs: dict[str, Any] = Field(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return "resumer-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model, "model_tool": self.model_tool}

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
        strict = kwargs.pop("strict", None)
        kwargs.pop("parallel_tool_calls", None)  # not a parameter the model tool passes on
        formatted = [convert_to_openai_tool(t, strict=strict) for t in tools]
        if tool_choice is not None and tool_choice is not False:
            kwargs["tool_choice"] = _tool_choice(tool_choice, formatted)
        return self.bind(tools=formatted, **kwargs)

    def with_structured_output(
        self,
        schema: Any,
        *,
        method: str = "json_schema",
        include_raw: bool = False,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """As LangChain's OpenAI chat model does it: `json_schema` (the default) asks for the
        schema as the chat API's response_format and parses the answer's JSON; `json_mode`
        asks for any JSON object; `function_calling` asks for it as a tool call."""
        if method == "function_calling":
            return super().with_structured_output(schema, include_raw=include_raw, **kwargs)
        if kwargs:
            raise ValueError(f"ChatResumer.with_structured_output takes no {', '.join(kwargs)}")
        if method == "json_schema":
            function = convert_to_openai_function(schema, strict=bool(strict))
            function["schema"] = function.pop("parameters")
            response_format: dict[str, Any] = {"type": "json_schema", "json_schema": function}
        elif method == "json_mode":
            response_format = {"type": "json_object"}
        else:
            raise ValueError(f"method is json_schema, json_mode or function_calling: {method!r}")
        traced = {"kwargs": {"method": method}, "schema": schema}
        model = self.bind(response_format=response_format, ls_structured_output_format=traced)
        typed = isinstance(schema, type) and issubclass(schema, BaseModel)
        parser = PydanticOutputParser(pydantic_object=schema) if typed else JsonOutputParser()
        if not include_raw:
            return model | parser
        parsed = RunnablePassthrough.assign(
            parsed=lambda raw: parser.invoke(raw["raw"]), parsing_error=lambda _: None
        )
        failed = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=model) | parsed.with_fallbacks(
            [failed], exception_key="parsing_error"
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        stage = bridge.current()
        if stage is None:
            raise RuntimeError(OUTSIDE)
        request = {
            "model": stage.model(self.model),
            "messages": convert_to_openai_messages(messages),
            **self._params(stop, kwargs),
        }
        call_id = stage.numbering.turn()
        reply = stage.ask(lambda: stage.ctx.call(call_id, self.model_tool, **request))
        if not isinstance(reply, dict) or not isinstance(reply.get("message"), dict):
            raise RuntimeError(
                f"{call_id} has no recorded answer (abandoned, or confirmed by hand without "
                "one): the graph cannot go on from it"
            )
        message = _ai_message(call_id, reply)
        stage.numbering.assign((c["name"], c["id"] or "") for c in message.tool_calls)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _params(self, stop: list[str] | None, given: dict[str, Any]) -> dict[str, Any]:
        """The turn's parameters: this model's own, then the call's (bound tools, ...)."""
        params: dict[str, Any] = dict(self.model_kwargs)
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        if stop:
            params["stop"] = list(stop)
        params.update(given)
        unknown = set(params) - set(PARAMETERS)
        if unknown:
            raise ValueError(
                f"ChatResumer passes on {', '.join(PARAMETERS)}; not {', '.join(sorted(unknown))}"
            )
        return params


def _tool_choice(choice: Any, tools: list[dict[str, Any]]) -> Any:
    """LangChain's tool_choice in the chat API's words: a tool's name asks for that tool."""
    if isinstance(choice, dict):
        return choice
    if choice in TOOL_CHOICES:
        return TOOL_CHOICES[choice]
    if choice in {t["function"]["name"] for t in tools}:
        return {"type": "function", "function": {"name": choice}}
    return choice


def _ai_message(call_id: str, reply: dict[str, Any]) -> AIMessage:
    """The model tool's answer as LangChain's message: its text, its tool calls (a call whose
    arguments are not JSON kept as an invalid one, as LangChain's OpenAI model does), its
    usage; its id the call's, the same on every attempt."""
    said = reply["message"]
    calls, invalid = [], []
    for raw in said.get("tool_calls") or []:
        try:
            calls.append(parse_tool_call(raw, return_id=True))
        except Exception as exc:  # OutputParserException: arguments that are not JSON
            invalid.append(make_invalid_tool_call(raw, str(exc)))
    usage = reply.get("usage") or {}
    prompt, completion = int(usage.get("prompt", 0)), int(usage.get("completion", 0))
    return AIMessage(
        content=said.get("content") or "",
        tool_calls=calls,
        invalid_tool_calls=invalid,
        id=f"resumer-{call_id}",
        usage_metadata={
            "input_tokens": prompt,
            "output_tokens": completion,
            "total_tokens": prompt + completion,
        },
        response_metadata={
            "model_name": reply.get("response_model") or reply.get("model") or "",
            "finish_reason": reply.get("finish_reason") or "",
        },
    )

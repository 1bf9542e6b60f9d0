"""The SDK's model, as Resumer's model tool: a `Model` whose every answer is a recorded call
of a chat-completions tool (runs/tools/model.py), and the `ModelProvider` that hands it out.

    Runner → TurnModel.get_response(system, input items, settings, tools, output schema)
           → the request in Chat Completions' shape (the SDK's own Converter, as its
             chat-completions models build it): system message, messages, tools, tool_choice,
             response_format and the sampling parameters the model tool keys on
           → ctx.call("turn-N", model tool, model=..., messages=[...], **params)
           → the recorded answer's message, back into the SDK's output items

So a turn is keyed by its conversation up to it, priced and metered like any model call, and
a turn recorded before (a resume, a stage entered again after a gate) is handed back without
asking the model: never billed twice. Nothing in the request depends on the clock or on
chance, so a re-entered stage asks each turn exactly as it did (the divergence check compares
them).

Not here: streaming (a recorded turn is a whole answer; `Runner.run_streamed` is refused),
the Responses API's server-side state (`previous_response_id`, `conversation_id`, prompts:
the conversation must be in the ledger, not on a provider's server), and settings the model
tool does not send (parallel_tool_calls, reasoning, metadata, extra_args).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelProvider, ModelResponse, ModelSettings, ModelTracing, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.exceptions import UserError
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.models.chatcmpl_converter import Converter
from agents.tool import Tool
from asgiref.sync import sync_to_async
from openai import Omit
from openai.types.chat import ChatCompletionMessage
from openai.types.responses import ResponseFunctionToolCall
from pydantic_core import to_jsonable_python

from runs.integrations.openai_agents.session import Session

# ModelSettings the model tool sends and keys a turn on (runs/tools/model.py, PARAMETERS).
SAMPLING = ("temperature", "top_p", "max_tokens", "frequency_penalty", "presence_penalty")
NO_STREAMING = (
    "streaming is not supported in a Resumer stage: a recorded turn is a whole answer, "
    "replayed whole; use Runner.run (OpenAIAgent.run)"
)


def chat_request(
    model: str,
    system_instructions: str | None,
    input: str | list[TResponseInputItem],
    model_settings: ModelSettings,
    tools: list[Tool],
    output_schema: AgentOutputSchemaBase | None,
    handoffs: list[Handoff],
) -> dict[str, Any]:
    """What a turn asks the model tool, besides the model: the messages and the parameters,
    as JSON (the same every time for the same conversation)."""
    messages: list[Any] = list(Converter.items_to_messages(input, model=model))
    if system_instructions:
        messages.insert(0, {"role": "system", "content": system_instructions})
    request: dict[str, Any] = {"messages": messages}
    offered = [Converter.tool_to_openai(tool) for tool in tools]
    offered += [Converter.convert_handoff_tool(handoff) for handoff in handoffs]
    if offered:
        request["tools"] = offered
    choice = Converter.convert_tool_choice(model_settings.tool_choice)
    if not isinstance(choice, Omit):
        request["tool_choice"] = choice
    response_format = Converter.convert_response_format(output_schema)
    if not isinstance(response_format, Omit):
        request["response_format"] = response_format
    for name in SAMPLING:
        value = getattr(model_settings, name)
        if value is not None:
            request[name] = value
    return to_jsonable_python(request)


class TurnModel(Model):
    """A model of one agent run: each answer a recorded `turn-N` of the model tool."""

    def __init__(self, session: Session, model: str) -> None:
        self.session = session
        self.model = model

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        if previous_response_id or conversation_id or prompt:
            raise UserError(
                "previous_response_id, conversation_id and prompts keep the conversation on "
                "the provider's server; in a Resumer stage it is in the ledger: pass the input"
            )
        request = chat_request(
            self.model,
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
        )
        call_id = self.session.next_turn()
        reply = await sync_to_async(self._ask, thread_sensitive=True)(call_id, request)
        message = ChatCompletionMessage.model_validate(_message(reply, call_id))
        output = Converter.message_to_output_items(message)
        self.session.name_calls(
            (item.name, item.call_id)
            for item in output
            if isinstance(item, ResponseFunctionToolCall)
        )
        return ModelResponse(output=output, usage=_usage(reply), response_id=None)

    def _ask(self, call_id: str, request: dict[str, Any]) -> Any:
        session = self.session
        return session.call(
            call_id, session.model_tool, {"model": self.model, **request}, refusable=False
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise UserError(NO_STREAMING)


class TurnModels(ModelProvider):
    """Every model name of one agent run, through the model tool (RunConfig.model_provider)."""

    def __init__(self, session: Session, default: str) -> None:
        self.session = session
        self.default = default

    def get_model(self, model_name: str | None) -> Model:
        return TurnModel(self.session, model_name or self.default)


def _message(reply: Any, call_id: str) -> dict[str, Any]:
    if not isinstance(reply, dict) or not isinstance(reply.get("message"), dict):
        raise UserError(
            f"{call_id} has no recorded answer (abandoned, or confirmed by hand without one): "
            "the agent cannot go on from it"
        )
    return {"role": "assistant", **reply["message"]}


def _usage(reply: dict[str, Any]) -> Usage:
    tokens = reply.get("usage") or {}
    prompt, completion = int(tokens.get("prompt", 0)), int(tokens.get("completion", 0))
    return Usage(
        requests=1,
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=prompt + completion,
    )

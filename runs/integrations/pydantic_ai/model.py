"""The agent's model: each request a `ctx.call` of Resumer's model tool.

Pydantic AI's own `OpenAIChatModel` builds each Chat Completions request from the run's
messages, tools and output type, and reads the answer back into its `ModelResponse`: the SDK's
code, not a copy of it. Only its HTTP transport is Resumer's (`ResumerTransport`, handed to
the OpenAI client as its `http_client`, the SDK's documented way to bring your own): instead
of sending the request, it asks the stage thread to make it

    ctx.call("turn-N", <model tool>, model=..., messages=[...], tools=..., tool_choice=...)

where N counts the model's answers the request already holds, plus one (the same request, on
a later attempt of the stage, gets the same id and is replayed). The model tool
(runs/tools/model.py) keys, prices, records and, on a resume, reuses the turn; its result
becomes the Chat Completions answer the SDK reads. Parameters the model tool does not pass on
(runs/tools/model.py's PARAMETERS) are refused with the parameter's name, never dropped.
`ResumerModel`, the wrapper the agent runs with, refuses streaming: a turn is one recorded
answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from openai import AsyncOpenAI
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from runs.integrations.pydantic_ai.bridge import current
from runs.tools.model import PARAMETERS

# Where the SDK's client believes it sends: the transport never opens a connection.
NOWHERE = "http://resumer.invalid/v1"
# What every request holds besides the parameters: the model, the messages, and stream=False.
FRAME = ("model", "messages", "stream")


class ModelRequestRefused(ValueError):
    """The SDK asked for something the model tool does not pass on (a parameter, a stream)."""


def call_id(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def arguments(body: dict[str, Any]) -> dict[str, Any]:
    """The model tool's arguments for one Chat Completions request body."""
    if body.get("stream"):
        raise ModelRequestRefused("streaming is not supported inside a Resumer stage")
    unknown = sorted(set(body) - set(FRAME) - set(PARAMETERS))
    if unknown:
        raise ModelRequestRefused(
            f"Resumer's model tool does not pass on {', '.join(unknown)} "
            f"(it passes {', '.join(PARAMETERS)})"
        )
    return {name: value for name, value in body.items() if name != "stream"}


def completion(turn: str, reply: Any) -> dict[str, Any]:
    """The model tool's recorded result as the Chat Completions answer the SDK reads."""
    if not isinstance(reply, dict) or not isinstance(reply.get("message"), dict):
        raise ModelRequestRefused(
            f"{turn} has no recorded answer (abandoned, or confirmed by hand without one): "
            "the agent cannot go on from it"
        )
    tokens = reply.get("usage") or {}
    prompt, done = int(tokens.get("prompt", 0)), int(tokens.get("completion", 0))
    return {
        "id": reply.get("external_id") or turn,
        "object": "chat.completion",
        "created": 0,  # not recorded: the SDK then stamps no provider time
        "model": reply.get("response_model") or reply.get("model") or "",
        "choices": [
            {
                "index": 0,
                "message": reply["message"],
                "finish_reason": reply.get("finish_reason") or "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": done,
            "total_tokens": prompt + done,
            "prompt_tokens_details": {"cached_tokens": int(tokens.get("cached", 0))},
        },
    }


class ResumerTransport(httpx2.AsyncBaseTransport):
    """The OpenAI client's transport: each request a model turn made by the stage thread."""

    def __init__(self, model_tool: str, prefix: str = "") -> None:
        self.model_tool = model_tool
        self.prefix = prefix

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        bridge = current()
        body = json.loads(await request.aread())
        answered = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        turn = call_id(self.prefix, f"turn-{answered + 1}")

        def work() -> dict[str, Any]:  # on the stage thread
            reply = bridge.ctx.call(turn, self.model_tool, **arguments(body))
            return completion(turn, reply)

        answer = await bridge.durable(work)
        return httpx2.Response(200, json=answer, request=request)


class ResumerModel(WrapperModel):
    """The model a ResumerAgent runs with: the SDK's OpenAIChatModel on Resumer's transport,
    named `model_name` (what the model tool sends as `model`)."""

    def __init__(self, model_name: str, *, model_tool: str = "model", prefix: str = "") -> None:
        client = AsyncOpenAI(
            base_url=NOWHERE,
            api_key="unused",  # the model tool holds the real key, read at call time
            max_retries=0,  # Resumer's replay policy decides what is asked again
            http_client=httpx2.AsyncClient(transport=ResumerTransport(model_tool, prefix)),
        )
        super().__init__(OpenAIChatModel(model_name, provider=OpenAIProvider(openai_client=client)))

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        raise UserError(
            "streaming is not supported inside a Resumer stage: a model turn is one recorded "
            "answer (use run_sync)"
        )
        yield  # an async generator, as the SDK's own wrappers are


def model_name_of(model: Model | str | None) -> str:
    """The name the model tool sends for an agent's own model ("openai:gpt-4o": "gpt-4o")."""
    if isinstance(model, Model):
        return model.model_name
    if isinstance(model, str) and model:
        return model.split(":", 1)[1] if ":" in model else model
    raise UserError("the agent has no model: give ResumerAgent.run_sync a model= name")

"""Model tools: chat completions against any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama,
llama.cpp's server, LiteLLM's proxy), declared in a few lines:

    model = model_tool(
        "model",
        base_url=lambda: os.environ["MODEL_BASE_URL"],     # read at call time
        api_key_env="MODEL_API_KEY",                        # read at call time, never recorded
        prices={"gpt-4o-mini": Price("0.15", "0.60", cached="0.075")},  # $ per 1M tokens
    )
    reply = ctx.call("summary", "model", model=ctx.inputs["model"], messages=[...])

The call is the official `openai` SDK's `chat.completions.create`, with the SDK's own retries
off (max_retries=0), so Resumer's replay policy governs. Replay is IDEMPOTENT-like:

    the delivery key .... sha256 of the model, the messages and the parameters (a turn's key
                          is its conversation up to that turn)
    confirmed ........... reused on a resume: never asked, never billed again
    unknown (time-out, a dropped answer, a 5xx) ... retried under the same key; the plan says
                          it may be billed twice, because model APIs do not deduplicate
    4xx ................. ModelRejected (a ToolRejected): nothing happened
    429, no connection .. retried inside the call (nothing was billed), within `attempts`

The usage (prompt, completion and cached tokens) is read from the answer and recorded in the
call's event with the model; the money comes from the tool's `prices=`, else settings
RESUMER_MODEL_PRICES, else genai-prices' maintained table (a model none of them knows costs
$0), and flows into the stage's usage, the plan and the contract. Each
exchange is recorded like an HTTP tool's (Authorization never is), and the messages with the
answer are stored as a content-addressed artifact, the conversation: context for people and
for a later turn, never evidence (the planner, replay and the contract do not read it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import ModuleType
from typing import TYPE_CHECKING, Any

import httpx
from django.conf import settings

from runs import tracing
from runs.ledger import artifacts, exchanges
from runs.ledger.chain import digest
from runs.ledger.exchanges import Exchange, ExchangeOutcome
from runs.models import ReplayPolicy
from runs.pipeline import Context, KeyParts, OutcomeUnknown, Tool, ToolRejected
from runs.tools.http_response import recorded
from runs.tools.http_spec import _tls_context

if TYPE_CHECKING:
    import openai

BILLED_TWICE = "may be billed twice: model APIs do not deduplicate"
# Parameters of a chat completion that change the answer: part of the delivery key.
PARAMETERS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "tools",
    "tool_choice",
    "response_format",
    "n",
    "presence_penalty",
    "frequency_penalty",
)
MILLION = Decimal(1_000_000)


def sdk() -> ModuleType:
    """The `openai` SDK, imported at the first call, not with the pipelines that declare a
    model tool: it takes most of a second to import, which every command line that loads them
    (`start_run --help`, `check`) would pay. A worker imports it before its first job
    (execution/engine.py, warm_up) and every stage job before it takes its lease."""
    import openai

    return openai


def price_table() -> ModuleType:
    """genai-prices, the maintained table of model prices (a snapshot pinned with the
    package; it is never fetched over the network here), imported at the first price it is
    asked for: a command line that never prices a call does not pay for it. A worker loads it
    with the SDK (execution/engine.py, warm_up)."""
    import genai_prices

    return genai_prices


def catalogue_cost(model: str, tokens: Mapping[str, int]) -> Decimal:
    """What the price table says these tokens of `model` cost (prompt tokens include the
    cached ones, as the model APIs count them); $0 for a model it does not know."""
    table = price_table()
    usage = table.Usage(
        input_tokens=tokens.get("prompt", 0),
        output_tokens=tokens.get("completion", 0),
        cache_read_tokens=tokens.get("cached", 0) or None,
    )
    try:
        return Decimal(table.calc_price(usage, model).total_price)
    except (LookupError, ValueError):  # a model (or a provider) the table does not list
        return Decimal(0)


class ModelRejected(ToolRejected):
    """The model API refused the request (a 4xx): nothing was generated, nothing billed."""


class ModelUnavailable(OutcomeUnknown):
    """No answer, or a 5xx: the completion may have been generated (and billed)."""


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens; cached prompt tokens at `cached` (default: `prompt`)."""

    prompt: Decimal | str
    completion: Decimal | str
    cached: Decimal | str | None = None

    def cost(self, tokens: Mapping[str, int]) -> Decimal:
        prompt, cached = tokens.get("prompt", 0), tokens.get("cached", 0)
        cached_price = Decimal(self.cached if self.cached is not None else self.prompt)
        total = (
            Decimal(self.prompt) * (prompt - cached)
            + cached_price * cached
            + Decimal(self.completion) * tokens.get("completion", 0)
        )
        return total / MILLION

    @classmethod
    def of(cls, value: Price | Mapping[str, Any]) -> Price:
        if isinstance(value, Price):
            return value
        return cls(str(value["prompt"]), str(value["completion"]), value.get("cached"))


def request_of(args: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies a completion request: the model, the messages, the parameters."""
    return {
        "model": args["model"],
        "messages": args["messages"],
        **{name: args[name] for name in PARAMETERS if name in args},
    }


@dataclass(frozen=True)
class ModelTool:
    """The declaration behind a model tool; `call`, `key` and `metered` are what Tool gets."""

    name: str
    base_url: str | Callable[[], str]
    api_key_env: str = "OPENAI_API_KEY"
    prices: Mapping[str, Price | Mapping[str, Any]] | None = None
    connect_timeout: float = 2.0
    read_timeout: float = 60.0
    attempts: int = 3
    target: str = "model API"
    account: Callable[[Context], str] | None = None
    trust_env: bool = True
    _clients: dict = field(default_factory=dict, compare=False, repr=False)

    # --- the key and the price ----------------------------------------------------------

    def key(self, ctx: Context, args: dict[str, Any]) -> KeyParts:
        account = self.account(ctx) if self.account else ctx.pipeline.name
        return KeyParts(
            account,
            f"model:{self.name}",
            f"{ctx.root_id}/{ctx.stage}",
            digest(request_of(args))[:32],
        )

    def price(self, model: str) -> Price | None:
        table = self.prices if self.prices is not None else settings.RESUMER_MODEL_PRICES
        found = table.get(model)
        if found is None:  # "gpt-4o-2024-08-06" priced as "gpt-4o"
            prefixes = [name for name in table if model.startswith(name)]
            found = table[max(prefixes, key=len)] if prefixes else None
        return Price.of(found) if found is not None else None

    def metered(self, result: dict[str, Any]) -> tuple[Decimal, dict[str, int]]:
        """What the call's tokens cost: the tool's `prices=`, else RESUMER_MODEL_PRICES, else
        the maintained price table (genai-prices); $0 for a model none of them knows."""
        tokens = dict(result.get("usage") or {})
        model = str(result.get("model", ""))
        price = self.price(model)
        money = price.cost(tokens) if price is not None else catalogue_cost(model, tokens)
        return money.quantize(Decimal("0.0001")), tokens

    # --- the call -------------------------------------------------------------------------

    def call(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        request = request_of(args)
        openai = sdk()
        client = self._client()
        for number in range(1, self.attempts + 1):
            started = time.monotonic()
            try:
                with tracing.model_call(request["model"], self.target) as span:
                    raw = client.chat.completions.with_raw_response.create(
                        **request, extra_headers={"Idempotency-Key": key} if key else None
                    )
                    completion = raw.parse()
                    if completion.usage is not None:
                        usage = completion.usage
                        span.usage(usage.prompt_tokens, usage.completion_tokens, completion.model)
            except openai.APIError as exc:
                if self._failed(exc, number, started) and number < self.attempts:
                    time.sleep(min(0.5 * 2 ** (number - 1), 5))
                    continue
                raise self._error(exc) from exc
            self._note(raw.http_request, raw.http_response, number, started)
            return self._result(args, key, completion)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _client(self) -> openai.OpenAI:
        base = self.base_url() if callable(self.base_url) else self.base_url
        api_key = os.environ.get(self.api_key_env, "") or "not-needed"
        # One client per endpoint and key, kept by the process: the SDK's own retries off.
        cached = self._clients.get((base, api_key))
        if cached is None:
            cached = sdk().OpenAI(
                base_url=base,
                api_key=api_key,
                max_retries=0,
                timeout=httpx.Timeout(self.read_timeout, connect=self.connect_timeout),
                http_client=httpx.Client(
                    trust_env=self.trust_env, verify=_tls_context(self.trust_env)
                ),
            )
            self._clients[(base, api_key)] = cached
        return cached

    def _failed(self, exc: openai.APIError, number: int, started: float) -> bool:
        """Note a failed attempt; True when nothing can have been billed (no connection was
        made, or a 429), so the same request may be sent again at once."""
        openai = sdk()
        response = getattr(exc, "response", None)
        retry = isinstance(exc, openai.RateLimitError) or (
            isinstance(exc, openai.APIConnectionError)
            and isinstance(exc.__cause__, httpx.ConnectError)
        )
        last = number >= self.attempts
        if retry and not last:
            outcome = ExchangeOutcome.RETRIED
        elif isinstance(exc, openai.APIStatusError) and exc.status_code < 500:
            outcome = ExchangeOutcome.REJECTED
        else:
            outcome = ExchangeOutcome.UNKNOWN
        request = getattr(exc, "request", None)
        if request is not None:
            self._note(request, response, number, started, outcome=outcome, error=str(exc))
        return retry

    def _error(self, exc: openai.APIError) -> Exception:
        openai = sdk()
        if isinstance(exc, openai.APITimeoutError):
            return ModelUnavailable(
                f"{self.target} did not answer within {self.read_timeout:g} s", timed_out=True
            )
        if isinstance(exc, openai.APIStatusError) and exc.status_code < 500:
            return ModelRejected(f"{self.target} answered {exc.status_code}: {exc.message}"[:500])
        if isinstance(exc, openai.APIStatusError):
            return ModelUnavailable(f"{self.target} answered {exc.status_code}: {exc.message}")
        if isinstance(exc.__cause__, httpx.ConnectError):
            # Worded as the HTTP tool words it: nothing was sent, so nothing was slow.
            return ModelUnavailable(f"{self.target} could not be reached ({exc.__cause__})")
        return ModelUnavailable(f"{self.target} did not answer ({type(exc).__name__}: {exc})")

    def _note(
        self,
        request: httpx.Request,
        response: httpx.Response | None,
        number: int,
        started: float,
        *,
        outcome: ExchangeOutcome = ExchangeOutcome.CONFIRMED,
        error: str = "",
    ) -> None:
        exchanges.record(
            Exchange(
                tool=self.name,
                attempt=number,
                method=request.method,
                url=str(request.url),
                outcome=outcome,
                request_headers=recorded(request.headers),
                request_body=request.content,
                status=None if response is None else response.status_code,
                response_headers={} if response is None else recorded(response.headers),
                response_body=b"" if response is None else response.content,
                error=error[:500],
                elapsed_ms=int((time.monotonic() - started) * 1000),
            ).redacted()
        )

    def _result(self, args: dict[str, Any], key: str, completion: Any) -> dict[str, Any]:
        choice = completion.choices[0]
        message = choice.message.model_dump(exclude_none=True)
        usage = completion.usage
        cached = 0
        if usage is not None and usage.prompt_tokens_details is not None:
            cached = usage.prompt_tokens_details.cached_tokens or 0
        tokens = {
            "prompt": usage.prompt_tokens if usage else 0,
            "completion": usage.completion_tokens if usage else 0,
            "cached": cached,
        }
        conversation = store_conversation(
            f"conversation/{key[:16] or digest(request_of(args))[:16]}",
            {"model": args["model"], "messages": [*args["messages"], message]},
        )
        return {
            "external_id": completion.id or f"chat-{key[:16]}",
            "model": args["model"],
            "response_model": completion.model,
            "message": message,
            "content": message.get("content") or "",
            "finish_reason": choice.finish_reason,
            "usage": tokens,
            "conversation": conversation,
        }


def store_conversation(name: str, conversation: dict[str, Any]) -> dict[str, str]:
    """The messages as a content-addressed artifact; what an event references."""
    data = json.dumps(conversation, ensure_ascii=False, indent=1).encode()
    stored = artifacts.store(name, data, "application/json")
    return {"uri": stored.uri, "sha256": stored.sha256}


def model_tool(
    name: str = "model",
    *,
    base_url: str | Callable[[], str],
    api_key_env: str = "OPENAI_API_KEY",
    prices: Mapping[str, Price | Mapping[str, Any]] | None = None,
    connect_timeout: float = 2.0,
    read_timeout: float = 60.0,
    attempts: int = 3,
    target: str = "model API",
    account: Callable[[Context], str] | None = None,
    meter: str = "model",
) -> Tool:
    """Declare a chat-completions tool. The stage passes `model`, `messages` and any of
    PARAMETERS to ctx.call; the key, the usage and the money follow from them."""
    spec = ModelTool(
        name,
        base_url,
        api_key_env,
        prices,
        connect_timeout,
        read_timeout,
        attempts,
        target,
        account,
    )
    return Tool(
        name,
        ReplayPolicy.IDEMPOTENT,
        spec.call,
        key=spec.key,
        meter=meter,
        verb="ask the model",
        metered=spec.metered,
        caveat=BILLED_TWICE,
    )


def spec_of(tool: Tool) -> ModelTool | None:
    """The model declaration behind a tool built by model_tool(), else None."""
    owner = getattr(tool.call, "__self__", None)
    return owner if isinstance(owner, ModelTool) else None

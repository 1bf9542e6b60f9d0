"""HTTP tools: a tool that calls a JSON API, declared in a few lines.

    publish_article = http_tool(
        "publish_article",
        ReplayPolicy.RECONCILE_FIRST,
        method="POST",
        url="/v1/articles",
        base_url=lambda: settings.DEMO_SERVICE_URL,
        body=lambda args, key: {"title": args["title"], "body": args["body"], "delivery_key": key},
        key=publish_key,
        external_id="id",
        reconcile=Lookup("/v1/articles/by-key/{key}", matches=same_title),
        target="platform",
    )

The delivery key travels in the idempotency header (`Idempotency-Key` unless told otherwise)
and can be used in URL templates as {key}; the other placeholders are the call's arguments.
What the target's answer means:

    2xx                                  confirmed: the result dict, with "external_id"
    409 (key reused, different request)  KeyConflict: the run must stop and say so
    other 4xx                            HttpRejected (a ToolRejected): nothing happened
    5xx, time-out, connection dropped    TargetUnavailable: the outcome is unknown

SAFE and IDEMPOTENT tools retry a 5xx, a 429 or a network failure with the same key, within a
bounded budget with backoff (`Retry`), before the outcome counts as unknown; the other
policies never retry, since a second attempt is exactly what they must not do blindly.

A reconcile Lookup is one GET: 200 → found (and `matches` compares it with the effect's
request), 404 → not found, anything else or no answer → ReconcileUnavailable ("platform did
not answer within 5 s"), which a plan shows as a blocker that can be asked again. Time-outs
bound every request, so nothing hangs a page or a worker: a call takes at most
attempts × (connect + read time-out) plus the backoff pauses.

Every request and response is an Exchange, noted in runs.ledger.exchanges (and carried by
the errors) so the engine can put them in the event payload: `Exchange.payload()` keeps bodies
up to RESUMER_HTTP_INLINE_BODY_BYTES inline and stores larger ones as artifacts.

This module is the face users' pipelines import; the declaration and its requests are in
http_spec, the errors in http_errors, the retry budget in http_retry, and what is read from an
answer in http_response.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from runs.ledger.exchanges import Exchange, ExchangeOutcome
from runs.models import ReplayPolicy
from runs.pipeline import Confirm, Context, KeyParts, Tool
from runs.tools.http_errors import (
    HttpRejected,
    HttpToolError,
    KeyConflict,
    ReconcileUnavailable,
    TargetUnavailable,
)
from runs.tools.http_retry import Retry
from runs.tools.http_spec import Headers, HttpTool, Lookup

__all__ = [
    "Exchange",
    "ExchangeOutcome",
    "Headers",
    "HttpRejected",
    "HttpTool",
    "HttpToolError",
    "KeyConflict",
    "Lookup",
    "ReconcileUnavailable",
    "Retry",
    "TargetUnavailable",
    "http_tool",
    "spec_of",
]


def http_tool(
    name: str,
    policy: ReplayPolicy,
    *,
    url: str,
    method: str = "POST",
    base_url: str | Callable[[], str] = "",
    body: Callable[[dict[str, Any], str], Any] | None = None,
    params: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None,
    key: Callable[[Context, dict[str, Any]], KeyParts] | None = None,
    external_id: str | Callable[[Any], str] | None = None,
    result: Callable[[Any], dict[str, Any]] | None = None,
    reconcile: Lookup | str | None = None,
    idempotency_header: str | None = "Idempotency-Key",
    headers: Headers | None = None,
    connect_timeout: float = 2.0,
    read_timeout: float = 5.0,
    retry: Retry | None = None,
    target: str = "",
    trust_env: bool = True,
    cost: Decimal = Decimal(0),
    meter: str = "",
    verb: str = "call",
    confirm: Confirm | bool | None = None,
    secret: tuple[str, ...] = (),
    **fields: Any,
) -> Tool:
    """Declare a tool that calls a JSON API. `url` (and a Lookup's url) is a template over
    the call's arguments and {key}; a relative one is joined to `base_url` (a string, or a
    function read at call time, e.g. from settings). `body(args, key)` builds the JSON body
    (default: the arguments, for POST/PUT/PATCH); `external_id` is a dotted path into the
    response ("id", "data.0.id") or a function of it, required for every policy but SAFE;
    `result(response_json)` shapes what the stage gets (default: the response object).
    `secret` names the query parameters, headers and JSON body fields that carry
    credentials: the recorded exchanges show them redacted, as they do the common names
    (api_key, token, key, signature, ...: runs/ledger/exchanges.py's SECRET_NAMES). The
    Tool's other fields are passed on as they are given (args=, price=, caveat=...)."""
    lookup = Lookup(reconcile) if isinstance(reconcile, str) else reconcile
    spec = HttpTool(
        name=name,
        policy=policy,
        url=url,
        method=method,
        base_url=base_url,
        body=body,
        params=params,
        external_id=external_id,
        result=result,
        lookup=lookup,
        idempotency_header=idempotency_header,
        headers=headers,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retry=retry or Retry(),
        target=target,
        trust_env=trust_env,
        secret=tuple(secret),
    )
    reconcile_with = spec.reconcile if lookup is not None else None
    return Tool(name, policy, spec.call, key, reconcile_with, cost, meter, verb, confirm, **fields)


def spec_of(tool: Tool) -> HttpTool | None:
    """The HTTP declaration behind a tool built by http_tool(), else None."""
    owner = getattr(tool.call, "__self__", None)
    return owner if isinstance(owner, HttpTool) else None

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
"""

from __future__ import annotations

import functools
import json
import random
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from runs import pipeline
from runs.ledger import exchanges
from runs.ledger.exchanges import Exchange, ExchangeOutcome
from runs.models import ReplayPolicy
from runs.pipeline import Context, KeyParts, Reconciliation, Tool, ToolRejected

if TYPE_CHECKING:
    from runs.models import Effect

# Moved to runs.ledger.exchanges; still here until the engine imports them from there.
recording = exchanges.recording
exchanges_payload = exchanges.exchanges_payload

# Headers worth keeping in the record. Nothing else is recorded, so credentials
# (Authorization, Cookie, API keys) never reach the event log.
RECORDED_HEADERS = frozenset(
    {
        "idempotency-key",
        "idempotent-replayed",
        "retry-after",
        "content-type",
        "content-length",
        "location",
        "request-id",
        "x-request-id",
    }
)
RETRYING_POLICIES = frozenset({ReplayPolicy.SAFE, ReplayPolicy.IDEMPOTENT})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


# --- what can go wrong ---------------------------------------------------------------------


class HttpToolError(Exception):
    """Base of the HTTP tools' errors; `exchanges` holds what the tool saw."""

    def __init__(self, message: str, *, exchanges: Sequence[Exchange] = ()) -> None:
        super().__init__(message)
        self.exchanges = tuple(exchanges)


class TargetUnavailable(HttpToolError):
    """The outcome is unknown: a 5xx, a time-out, a dropped or refused connection, or a 2xx
    whose body could not be read. `sent` is False only when no connection was ever made (the
    request cannot have arrived); `status` is the last status seen, if any."""

    def __init__(
        self,
        message: str,
        *,
        exchanges: Sequence[Exchange] = (),
        sent: bool = True,
        status: int | None = None,
    ) -> None:
        super().__init__(message, exchanges=exchanges)
        self.sent = sent
        self.status = status


class HttpRejected(ToolRejected, HttpToolError):
    """The target answered with a 4xx: it refused the request, nothing happened there."""

    def __init__(self, message: str, *, exchanges: Sequence[Exchange] = (), status: int) -> None:
        super().__init__(message, exchanges=exchanges)
        self.status = status


class KeyConflict(pipeline.KeyConflict, HttpToolError):
    """409: the target already holds a different request under this idempotency key. The
    pipeline API's KeyConflict, with the exchanges that showed it."""


class ReconcileUnavailable(HttpToolError):
    """A reconcile lookup got no usable answer: the effect's outcome is still unknown. Asking
    again later may succeed."""


# --- declaring a tool ------------------------------------------------------------------------


@dataclass(frozen=True)
class Retry:
    """How an IDEMPOTENT (or SAFE) tool retries a transient failure, with the same key.
    `attempts` counts the first one; the pause doubles from `backoff` up to `max_backoff`,
    with jitter, or follows the target's Retry-After within the same cap."""

    attempts: int = 3
    backoff: float = 0.2
    max_backoff: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("Retry needs attempts >= 1 and non-negative pauses")

    def pause(self, retry: int, retry_after: str | None = None) -> float:
        hinted = _retry_after_seconds(retry_after)
        if hinted is not None:
            return min(self.max_backoff, hinted)
        wait = min(self.max_backoff, self.backoff * 2 ** (retry - 1))
        return wait * random.uniform(0.5, 1.0)


def _retry_after_seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: use our own backoff


@dataclass(frozen=True)
class Lookup:
    """The reconcile request: GET of a URL template with {key} (the delivery key) and the
    effect's request arguments as placeholders. `matches(request_args, found)` says whether
    what the target holds is this request (default: anything under the key is)."""

    url: str
    matches: Callable[[dict[str, Any], Any], bool] | None = None


Headers = Mapping[str, str] | Callable[[], Mapping[str, str]]


@dataclass(frozen=True)
class HttpTool:
    """The declaration behind an HTTP tool; `call` and `reconcile` are what Tool gets."""

    name: str
    policy: ReplayPolicy
    url: str
    method: str = "POST"
    base_url: str | Callable[[], str] = ""
    body: Callable[[dict[str, Any], str], Any] | None = None
    params: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None
    external_id: str | Callable[[Any], str] | None = None
    result: Callable[[Any], dict[str, Any]] | None = None
    lookup: Lookup | None = None
    idempotency_header: str | None = "Idempotency-Key"
    headers: Headers | None = None
    connect_timeout: float = 2.0
    read_timeout: float = 5.0
    retry: Retry = Retry()
    target: str = ""
    trust_env: bool = True

    # --- the call ----------------------------------------------------------------------

    def call(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        method = self.method.upper()
        url = self._url(self.url, {**args, "key": key})
        headers = {"Accept": "application/json", **self._extra_headers()}
        content: bytes | None = None
        if self.body is not None or method in BODY_METHODS:
            value = self.body(args, key) if self.body is not None else args
            content = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
            headers["Content-Type"] = "application/json"
        if key and self.idempotency_header:
            headers[self.idempotency_header] = key
        params = dict(self.params(args)) if self.params is not None else None
        attempts = self.retry.attempts if self.policy in RETRYING_POLICIES else 1
        seen: list[Exchange] = []
        with self._client() as client:
            for attempt in range(1, attempts + 1):
                last = attempt == attempts
                request = client.build_request(
                    method, url, content=content, headers=headers, params=params
                )
                started = time.monotonic()
                try:
                    response = client.send(request)
                except httpx.TransportError as exc:
                    message, sent = self._no_answer(exc)
                    outcome = ExchangeOutcome.UNKNOWN if last else ExchangeOutcome.RETRIED
                    self._note(seen, attempt, request, None, outcome, started, error=message)
                    if last:
                        raise TargetUnavailable(
                            self._attempts(message, attempt), exchanges=seen, sent=sent
                        ) from exc
                    time.sleep(self.retry.pause(attempt))
                    continue
                status = response.status_code
                if response.is_success:
                    try:
                        result = self._result(response)
                    except ValueError as exc:
                        message = f"{self._target(request)} answered {status} but {exc}"
                        self._note(
                            seen, attempt, request, response, ExchangeOutcome.UNKNOWN, started
                        )
                        raise TargetUnavailable(message, exchanges=seen, status=status) from None
                    self._note(seen, attempt, request, response, ExchangeOutcome.CONFIRMED, started)
                    return result
                said = f"{self._target(request)} answered {status} {response.reason_phrase}"
                detail = _error_message(response)
                if status == 409 and key and self.idempotency_header:
                    self._note(seen, attempt, request, response, ExchangeOutcome.CONFLICT, started)
                    raise KeyConflict(
                        f"{said}: {detail or 'key reused with a different request'} "
                        f"({self.idempotency_header} {key[:12]}…)",
                        exchanges=seen,
                    )
                transient = status >= 500 or status == 429
                if transient and not last:
                    self._note(seen, attempt, request, response, ExchangeOutcome.RETRIED, started)
                    time.sleep(self.retry.pause(attempt, response.headers.get("retry-after")))
                    continue
                if 400 <= status < 500:  # a 429 out of retries: still nothing happened
                    self._note(seen, attempt, request, response, ExchangeOutcome.REJECTED, started)
                    raise HttpRejected(
                        f"{said}{': ' + detail if detail else ''}", exchanges=seen, status=status
                    )
                # 5xx (the target may have committed before failing), or a 1xx/3xx this
                # client cannot interpret: the outcome is unknown.
                self._note(seen, attempt, request, response, ExchangeOutcome.UNKNOWN, started)
                raise TargetUnavailable(
                    self._attempts(f"{said}{': ' + detail if detail else ''}", attempt),
                    exchanges=seen,
                    status=status,
                )
        raise AssertionError("unreachable: the last attempt returns or raises")

    # --- the reconcile lookup ----------------------------------------------------------

    def reconcile(self, effect: Effect) -> Reconciliation:
        if self.lookup is None:
            raise ValueError(f"tool {self.name} declares no reconcile lookup")
        request_args = dict(effect.request or {})
        url = self._url(self.lookup.url, {**request_args, "key": effect.delivery_key})
        seen: list[Exchange] = []
        with self._client() as client:
            request = client.build_request(
                "GET", url, headers={"Accept": "application/json", **self._extra_headers()}
            )
            started = time.monotonic()
            try:
                response = client.send(request)
            except httpx.TransportError as exc:
                message, _ = self._no_answer(exc)
                self._note(
                    seen, 1, request, None, ExchangeOutcome.UNAVAILABLE, started, error=message
                )
                raise ReconcileUnavailable(message, exchanges=seen) from exc
        target = self._target(request)
        if response.status_code == 404:
            self._note(seen, 1, request, response, ExchangeOutcome.NOT_FOUND, started)
            return Reconciliation(found=False, detail=f"{target} has nothing under this key")
        if response.status_code != 200:
            self._note(seen, 1, request, response, ExchangeOutcome.UNAVAILABLE, started)
            raise ReconcileUnavailable(
                f"{target} could not answer: {response.status_code} {response.reason_phrase}",
                exchanges=seen,
            )
        try:
            found = response.json()
            result = self._result(response)
        except ValueError as exc:
            self._note(seen, 1, request, response, ExchangeOutcome.UNAVAILABLE, started)
            raise ReconcileUnavailable(f"{target} answered 200 but {exc}", exchanges=seen) from None
        self._note(seen, 1, request, response, ExchangeOutcome.FOUND, started)
        external_id = str(result.get("external_id", ""))
        if self.lookup.matches is not None and not self.lookup.matches(request_args, found):
            return Reconciliation(
                found=True,
                matches=False,
                external_id=external_id,
                result=result,
                detail=f"{external_id} is on the {target} under this key but differs from the request",
            )
        return Reconciliation(
            found=True,
            external_id=external_id,
            result=result,
            detail=f"{external_id} is on the {target} under this key",
        )

    # --- helpers -------------------------------------------------------------------------

    def _client(self) -> httpx.Client:
        # One client per call: its retries share a connection pool, and nothing outlives
        # the call (workers are long-lived; a pooled connection would go stale).
        return httpx.Client(
            timeout=httpx.Timeout(self.read_timeout, connect=self.connect_timeout),
            follow_redirects=False,
            trust_env=self.trust_env,
            verify=_tls_context(self.trust_env),
        )

    def _url(self, template: str, values: Mapping[str, Any]) -> str:
        quoted = {k: quote(str(v), safe="") for k, v in values.items()}
        try:
            path = template.format_map(quoted)
        except (KeyError, IndexError) as exc:
            raise ValueError(
                f"tool {self.name}: the url {template!r} needs {exc.args[0]!r}, which the call "
                "does not give"
            ) from None
        if path.startswith(("http://", "https://")):
            return path
        base = self.base_url() if callable(self.base_url) else self.base_url
        if not base:
            raise ValueError(f"tool {self.name}: the relative url {template!r} needs a base_url")
        return f"{base.rstrip('/')}/{path.lstrip('/')}"

    def _extra_headers(self) -> dict[str, str]:
        if self.headers is None:
            return {}
        return dict(self.headers() if callable(self.headers) else self.headers)

    def _target(self, request: httpx.Request) -> str:
        return self.target or request.url.host

    def _no_answer(self, exc: httpx.TransportError) -> tuple[str, bool]:
        """What to say about a request that got no response, and whether it may have
        reached the target (False only when no connection was made)."""
        target = self._target(exc.request)
        if isinstance(exc, httpx.ConnectTimeout):
            return f"{target} did not answer within {self.connect_timeout:g} s (connect)", False
        if isinstance(exc, httpx.ConnectError):
            return f"{target} did not answer within {self.read_timeout:g} s ({exc})", False
        if isinstance(exc, httpx.TimeoutException):
            return f"{target} did not answer within {self.read_timeout:g} s", True
        if isinstance(exc, httpx.RemoteProtocolError):
            return (
                f"{target} did not answer within {self.read_timeout:g} s "
                "(the connection closed without a response)",
                True,
            )
        return f"{target} did not answer within {self.read_timeout:g} s ({exc})", True

    @staticmethod
    def _attempts(message: str, attempts: int) -> str:
        return f"{message} (after {attempts} attempts)" if attempts > 1 else message

    def _result(self, response: httpx.Response) -> dict[str, Any]:
        try:
            data = response.json() if response.content else None
        except ValueError:
            raise ValueError("its body is not JSON") from None
        if self.result is not None:
            result = dict(self.result(data))
        elif isinstance(data, dict):
            result = dict(data)
        else:
            result = {"value": data}
        if self.external_id is not None:
            result["external_id"] = _external_id(data, self.external_id)
        return result

    def _note(
        self,
        seen: list[Exchange],
        attempt: int,
        request: httpx.Request,
        response: httpx.Response | None,
        outcome: ExchangeOutcome,
        started: float,
        *,
        error: str = "",
    ) -> None:
        exchange = Exchange(
            tool=self.name,
            attempt=attempt,
            method=request.method,
            url=str(request.url),
            outcome=outcome,
            request_headers=_recorded(request.headers),
            request_body=request.content,
            status=None if response is None else response.status_code,
            response_headers={} if response is None else _recorded(response.headers),
            response_body=b"" if response is None else response.content,
            error=error,
            elapsed_ms=int((time.monotonic() - started) * 1000),
        )
        seen.append(exchange)
        exchanges.record(exchange)


@functools.cache
def _tls_context(trust_env: bool) -> ssl.SSLContext:
    """One TLS context per process, shared by every call's client: building one reads the
    whole CA bundle, which costs more than a call to a nearby service. (With trust_env it
    honours SSL_CERT_FILE / SSL_CERT_DIR, as httpx would per client.)"""
    return httpx.create_ssl_context(trust_env=trust_env)


def _recorded(headers: httpx.Headers) -> dict[str, str]:
    return {
        name.lower(): value for name, value in headers.items() if name.lower() in RECORDED_HEADERS
    }


def _error_message(response: httpx.Response) -> str:
    """The message of a JSON error body ({"error": {"message": ...}}, {"error": "..."},
    {"message": ...} or {"detail": ...}), else ""."""
    try:
        data = response.json()
    except ValueError:
        return ""
    if not isinstance(data, dict):
        return ""
    err = data.get("error")
    if isinstance(err, dict):
        err = err.get("message")
    for value in (err, data.get("message"), data.get("detail")):
        if isinstance(value, str) and value:
            return value[:500]
    return ""


def _external_id(data: Any, where: str | Callable[[Any], str]) -> str:
    if callable(where):
        value = where(data)
    else:
        value = data
        for part in where.split("."):
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                raise ValueError(f"its body has no external id at {where!r}")
    if value is None or value == "" or isinstance(value, dict | list):
        raise ValueError(f"its body has no usable external id at {where!r}")
    return str(value)


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
) -> Tool:
    """Declare a tool that calls a JSON API. `url` (and a Lookup's url) is a template over
    the call's arguments and {key}; a relative one is joined to `base_url` (a string, or a
    function read at call time, e.g. from settings). `body(args, key)` builds the JSON body
    (default: the arguments, for POST/PUT/PATCH); `external_id` is a dotted path into the
    response ("id", "data.0.id") or a function of it, required for every policy but SAFE;
    `result(response_json)` shapes what the stage gets (default: the response object)."""
    if policy != ReplayPolicy.SAFE and external_id is None:
        raise ValueError(f"tool {name}: a {policy} HTTP tool must say where its external id is")
    if connect_timeout <= 0 or read_timeout <= 0:
        raise ValueError(f"tool {name}: time-outs must be positive")
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
    )
    return Tool(
        name,
        policy,
        call=spec.call,
        key=key,
        reconcile=spec.reconcile if lookup is not None else None,
        cost=cost,
        meter=meter,
        verb=verb,
    )


def spec_of(tool: Tool) -> HttpTool | None:
    """The HTTP declaration behind a tool built by http_tool(), else None."""
    owner = getattr(tool.call, "__self__", None)
    return owner if isinstance(owner, HttpTool) else None

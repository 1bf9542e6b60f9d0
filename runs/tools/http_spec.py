"""HttpTool: the declaration behind an HTTP tool, and the two requests it makes: the call
(with its retries) and the reconcile lookup. What each answer means is the table in
runs/tools/http.py's docstring; every request is noted as an Exchange (runs.ledger.exchanges)."""

from __future__ import annotations

import functools
import json
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from runs import tracing
from runs.ledger import exchanges
from runs.ledger.exchanges import Exchange, ExchangeOutcome
from runs.models import ReplayPolicy
from runs.pipeline import Reconciliation
from runs.tools.http_errors import (
    HttpRejected,
    KeyConflict,
    ReconcileUnavailable,
    TargetUnavailable,
)
from runs.tools.http_response import error_message, external_id, recorded
from runs.tools.http_retry import RETRYING_POLICIES, Retry

if TYPE_CHECKING:
    from runs.models import Effect

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

Headers = Mapping[str, str] | Callable[[], Mapping[str, str]]


@dataclass(frozen=True)
class Lookup:
    """The reconcile request: GET of a URL template with {key} (the delivery key) and the
    effect's request arguments as placeholders. `matches(request_args, found)` says whether
    what the target holds is this request (default: anything under the key is)."""

    url: str
    matches: Callable[[dict[str, Any], Any], bool] | None = None


@dataclass
class _Attempt:
    """One request of a call or a lookup; `note` records it once its fate is known."""

    tool: str
    seen: list[Exchange]
    number: int
    last: bool
    request: httpx.Request
    # The names the tool marks as credentials, redacted in the record (exchanges.py).
    secret: tuple[str, ...] = ()
    started: float = field(default_factory=time.monotonic)

    def note(
        self,
        outcome: ExchangeOutcome,
        response: httpx.Response | None = None,
        *,
        error: str = "",
    ) -> None:
        exchange = Exchange(
            tool=self.tool,
            attempt=self.number,
            method=self.request.method,
            url=str(self.request.url),
            outcome=outcome,
            request_headers=recorded(self.request.headers),
            request_body=self.request.content,
            status=None if response is None else response.status_code,
            response_headers={} if response is None else recorded(response.headers),
            response_body=b"" if response is None else response.content,
            error=error,
            elapsed_ms=int((time.monotonic() - self.started) * 1000),
        ).redacted(self.secret)
        self.seen.append(exchange)
        exchanges.record(exchange)


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
    # Query parameters, headers and JSON body fields that carry credentials, beyond the
    # common names every exchange is redacted for (exchanges.SECRET_NAMES).
    secret: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.policy != ReplayPolicy.SAFE and self.external_id is None:
            raise ValueError(
                f"tool {self.name}: a {self.policy} HTTP tool must say where its external id is"
            )
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ValueError(f"tool {self.name}: time-outs must be positive")

    # --- the call ----------------------------------------------------------------------

    def call(self, args: dict[str, Any], key: str) -> dict[str, Any]:
        method = self.method.upper()
        url = self._url(self.url, {**args, "key": key})
        headers, content = self._headers_and_body(method, args, key)
        params = dict(self.params(args)) if self.params is not None else None
        attempts = self.retry.attempts if self.policy in RETRYING_POLICIES else 1
        seen: list[Exchange] = []
        with self._client() as client:
            for number in range(1, attempts + 1):
                request = client.build_request(
                    method, url, content=content, headers=headers, params=params
                )
                attempt = _Attempt(
                    self.name, seen, number, number == attempts, request, self.secret
                )
                try:
                    response = client.send(request)
                except httpx.TransportError as exc:
                    self._unanswered(attempt, exc)  # raises on the last attempt
                    time.sleep(self.retry.pause(number))
                    continue
                result = self._answered(attempt, response, key)
                if result is not None:
                    return result
                time.sleep(self.retry.pause(number, response.headers.get("retry-after")))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _headers_and_body(
        self, method: str, args: dict[str, Any], key: str
    ) -> tuple[dict[str, str], bytes | None]:
        headers = {"Accept": "application/json", **self._extra_headers()}
        content: bytes | None = None
        if self.body is not None or method in BODY_METHODS:
            value = self.body(args, key) if self.body is not None else args
            content = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
            headers["Content-Type"] = "application/json"
        if key and self.idempotency_header:
            headers[self.idempotency_header] = key
        return headers, content

    def _unanswered(self, attempt: _Attempt, exc: httpx.TransportError) -> None:
        """Note a request that got no response; with no retry left, the outcome is unknown."""
        message, sent = self._no_answer(exc)
        if not attempt.last:
            attempt.note(ExchangeOutcome.RETRIED, error=message)
            return
        attempt.note(ExchangeOutcome.UNKNOWN, error=message)
        raise TargetUnavailable(
            self._attempts(message, attempt.number),
            exchanges=attempt.seen,
            sent=sent,
            timed_out=isinstance(exc, httpx.TimeoutException),
        ) from exc

    def _answered(
        self, attempt: _Attempt, response: httpx.Response, key: str
    ) -> dict[str, Any] | None:
        """The result of a 2xx; None for a transient failure with a retry left; else the
        error the answer means, raised."""
        status = response.status_code
        target = self._target(attempt.request)
        if response.is_success:
            try:
                result = self._result(response)
            except ValueError as exc:
                attempt.note(ExchangeOutcome.UNKNOWN, response)
                raise TargetUnavailable(
                    f"{target} answered {status} but {exc}", exchanges=attempt.seen, status=status
                ) from None
            attempt.note(ExchangeOutcome.CONFIRMED, response)
            return result
        said = f"{target} answered {status} {response.reason_phrase}"
        detail = error_message(response)
        if status == 409 and key and self.idempotency_header:
            attempt.note(ExchangeOutcome.CONFLICT, response)
            raise KeyConflict(
                f"{said}: {detail or 'key reused with a different request'} "
                f"({self.idempotency_header} {key[:12]}…)",
                exchanges=attempt.seen,
            )
        if (status >= 500 or status == 429) and not attempt.last:
            attempt.note(ExchangeOutcome.RETRIED, response)
            return None
        said = f"{said}{': ' + detail if detail else ''}"
        if 400 <= status < 500:  # a 429 out of retries: still nothing happened
            attempt.note(ExchangeOutcome.REJECTED, response)
            raise HttpRejected(said, exchanges=attempt.seen, status=status)
        # 5xx (the target may have committed before failing), or a 1xx/3xx this client
        # cannot interpret: the outcome is unknown.
        attempt.note(ExchangeOutcome.UNKNOWN, response)
        raise TargetUnavailable(
            self._attempts(said, attempt.number), exchanges=attempt.seen, status=status
        )

    # --- the reconcile lookup ----------------------------------------------------------

    def reconcile(self, effect: Effect) -> Reconciliation:
        if self.lookup is None:
            raise ValueError(f"tool {self.name} declares no reconcile lookup")
        request_args = dict(effect.request or {})
        url = self._url(self.lookup.url, {**request_args, "key": effect.delivery_key})
        with self._client() as client:
            request = client.build_request(
                "GET", url, headers={"Accept": "application/json", **self._extra_headers()}
            )
            attempt = _Attempt(self.name, [], 1, True, request, self.secret)
            try:
                response = client.send(request)
            except httpx.TransportError as exc:
                message, _ = self._no_answer(exc)
                attempt.note(ExchangeOutcome.UNAVAILABLE, error=message)
                raise ReconcileUnavailable(message, exchanges=attempt.seen) from exc
        return self._found(attempt, response, request_args)

    def _found(
        self, attempt: _Attempt, response: httpx.Response, request_args: dict[str, Any]
    ) -> Reconciliation:
        target = self._target(attempt.request)
        if response.status_code == 404:
            attempt.note(ExchangeOutcome.NOT_FOUND, response)
            return Reconciliation(found=False, detail=f"{target} has nothing under this key")
        if response.status_code != 200:
            attempt.note(ExchangeOutcome.UNAVAILABLE, response)
            raise ReconcileUnavailable(
                f"{target} could not answer: {response.status_code} {response.reason_phrase}",
                exchanges=attempt.seen,
            )
        try:
            found = response.json()
            result = self._result(response)
        except ValueError as exc:
            attempt.note(ExchangeOutcome.UNAVAILABLE, response)
            raise ReconcileUnavailable(
                f"{target} answered 200 but {exc}", exchanges=attempt.seen
            ) from None
        attempt.note(ExchangeOutcome.FOUND, response)
        found_id = str(result.get("external_id", ""))
        matches = self.lookup.matches if self.lookup is not None else None
        if matches is not None and not matches(request_args, found):
            return Reconciliation(
                found=True,
                matches=False,
                external_id=found_id,
                result=result,
                detail=f"{found_id} is on the {target} under this key but differs from the request",
            )
        return Reconciliation(
            found=True,
            external_id=found_id,
            result=result,
            detail=f"{found_id} is on the {target} under this key",
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
        # With tracing on, `traceparent` too: the target's trace joins the call's span.
        if self.headers is None:
            return tracing.inject({})
        return tracing.inject(dict(self.headers() if callable(self.headers) else self.headers))

    def _target(self, request: httpx.Request) -> str:
        return self.target or request.url.host

    def _no_answer(self, exc: httpx.TransportError) -> tuple[str, bool]:
        """What to say about a request that got no response, and whether it may have
        reached the target (False only when no connection was made). Only a time-out is
        worded as one: an operator told a target was slow goes looking in the wrong place
        when it refused the connection or dropped it."""
        target = self._target(exc.request)
        if isinstance(exc, httpx.ConnectTimeout):
            return f"{target} did not answer within {self.connect_timeout:g} s (connect)", False
        if isinstance(exc, httpx.ConnectError):
            return f"{target} could not be reached ({exc})", False
        if isinstance(exc, httpx.TimeoutException):
            return f"{target} did not answer within {self.read_timeout:g} s", True
        if isinstance(exc, httpx.RemoteProtocolError):
            return f"{target} closed the connection without a response", True
        return f"{target} gave no answer ({type(exc).__name__}: {exc})", True

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
            result["external_id"] = external_id(data, self.external_id)
        return result


@functools.cache
def _tls_context(trust_env: bool) -> ssl.SSLContext:
    """One TLS context per process, shared by every call's client: building one reads the
    whole CA bundle, which costs more than a call to a nearby service. (With trust_env it
    honours SSL_CERT_FILE / SSL_CERT_DIR, as httpx would per client.)"""
    return httpx.create_ssl_context(trust_env=trust_env)

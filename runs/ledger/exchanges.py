"""The requests and responses a tool exchanged with its target, as the ledger records them.

A tool that speaks to a target notes each Exchange here (`record`); the engine collects them
around a call with `recording()` and puts them in the call's event payload with
`exchanges_payload()`, which keeps bodies up to RESUMER_HTTP_INLINE_BODY_BYTES inline and
stores larger ones as artifacts of the run. The engine knows this module, not the tools.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.conf import settings

from runs.ledger import artifacts
from runs.models import Run

ARTIFACT_NAME_RE = re.compile(r"[^A-Za-z0-9_./-]+")

# What a credential is called, whatever a tool says: a query parameter, header or JSON field
# of one of these names (any case, "-" and "_" alike) is recorded as REDACTED. A tool names
# its own on top (http_tool(secret=...)).
SECRET_NAMES = frozenset(
    {
        "access_token",
        "api_key",
        "apikey",
        "auth",
        "authorization",
        "client_secret",
        "cookie",
        "key",
        "password",
        "private_key",
        "refresh_token",
        "secret",
        "session",
        "set_cookie",
        "sig",
        "signature",
        "token",
        "x_api_key",
    }
)
REDACTED = "[redacted]"


def secret_names(extra: Iterable[str] = ()) -> frozenset[str]:
    return SECRET_NAMES | {_normal(name) for name in extra}


def _normal(name: str) -> str:
    return name.lower().replace("-", "_")


def _redact_url(url: str, secret: frozenset[str]) -> str:
    parts = urlsplit(url)
    if not parts.query:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(k, REDACTED if _normal(k) in secret else v) for k, v in pairs]
    if kept == pairs:
        return url
    return urlunsplit(parts._replace(query=urlencode(kept, safe="[]")))


def _redact_value(value: Any, secret: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {
            k: REDACTED if _normal(str(k)) in secret else _redact_value(v, secret)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact_value(v, secret) for v in value]
    return value


def _redact_body(body: bytes, secret: frozenset[str]) -> bytes:
    """A JSON body with its secret fields redacted; any other body as it was."""
    if not body:
        return body
    try:
        value = json.loads(body)
    except ValueError:
        return body
    redacted = _redact_value(value, secret)
    if redacted == value:
        return body
    return json.dumps(redacted, separators=(",", ":"), ensure_ascii=False).encode()


class ExchangeOutcome(StrEnum):
    CONFIRMED = "confirmed"  # a 2xx to a call
    RETRIED = "retried"  # a transient failure; the same request (same key) was sent again
    UNKNOWN = "unknown"  # a transient failure with no retry left: the outcome is unknown
    REJECTED = "rejected"  # a 4xx: the target refused, nothing happened
    CONFLICT = "conflict"  # a 409: the key was used for a different request
    FOUND = "found"  # a reconcile lookup answered 200
    NOT_FOUND = "not-found"  # a reconcile lookup answered 404
    UNAVAILABLE = "unavailable"  # a reconcile lookup got no usable answer


@dataclass(frozen=True)
class Exchange:
    """One request a tool sent and what came back (status None: no response at all)."""

    tool: str
    attempt: int
    method: str
    url: str
    outcome: ExchangeOutcome
    request_headers: dict[str, str]
    request_body: bytes
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: bytes = b""
    error: str = ""
    elapsed_ms: int = 0

    def redacted(self, extra: Iterable[str] = ()) -> Exchange:
        """This exchange as the ledger may keep it: the query parameters, headers and JSON
        body fields named as credentials (SECRET_NAMES, and `extra`: the tool's) replaced by
        REDACTED. What was sent is unchanged, and so is every key computed from it."""
        secret = secret_names(extra)

        def headers(values: dict[str, str]) -> dict[str, str]:
            return {k: REDACTED if _normal(k) in secret else v for k, v in values.items()}

        return replace(
            self,
            url=_redact_url(self.url, secret),
            request_headers=headers(self.request_headers),
            request_body=_redact_body(self.request_body, secret),
            response_headers=headers(self.response_headers),
            response_body=_redact_body(self.response_body, secret),
        )

    def payload(
        self, *, name: str, run: Run | None = None, inline_bytes: int | None = None
    ) -> dict[str, Any]:
        """A JSON-able record for an event payload. A body above the inline limit (or not
        UTF-8) is stored as the artifact `<name>/request` or `<name>/response` and
        referenced by uri, size and sha256."""
        limit = settings.RESUMER_HTTP_INLINE_BODY_BYTES if inline_bytes is None else inline_bytes
        record: dict[str, Any] = {
            "tool": self.tool,
            "attempt": self.attempt,
            "method": self.method,
            "url": self.url,
            "outcome": str(self.outcome),
            "elapsed_ms": self.elapsed_ms,
            "request": {
                "headers": self.request_headers,
                **_body(self.request_body, self.request_headers, f"{name}/request", run, limit),
            },
            "response": None,
        }
        if self.error:
            record["error"] = self.error
        if self.status is not None:
            record["response"] = {
                "status": self.status,
                "headers": self.response_headers,
                **_body(self.response_body, self.response_headers, f"{name}/response", run, limit),
            }
        return record


def _body(
    data: bytes, headers: Mapping[str, str], name: str, run: Run | None, limit: int
) -> dict[str, Any]:
    if not data:
        return {"body": ""}
    if len(data) <= limit:
        try:
            return {"body": data.decode()}
        except UnicodeDecodeError:
            pass
    stored = artifacts.store(
        ARTIFACT_NAME_RE.sub("-", name),
        data,
        headers.get("content-type", "application/octet-stream"),
        run=run,
    )
    return {"body_ref": stored.uri, "body_bytes": len(data), "body_sha256": stored.sha256}


def exchanges_payload(
    exchanges: Sequence[Exchange], *, name: str, run: Run | None = None
) -> list[dict[str, Any]]:
    """Every exchange as a payload record; large bodies become `<name>/<n>/request|response`
    artifacts (name e.g. "http/run-7/publish")."""
    return [ex.payload(name=f"{name}/{i}", run=run) for i, ex in enumerate(exchanges, start=1)]


# A context variable, not a module global: a block sees only the calls made inside it, in its
# own thread, and every block a call is nested in gets it.
_recorders: contextvars.ContextVar[tuple[list[Exchange], ...]] = contextvars.ContextVar(
    "http_exchange_recorders", default=()
)


@contextlib.contextmanager
def recording() -> Iterator[list[Exchange]]:
    """Collect every Exchange any tool records inside the block, whether it returns or
    raises:

        with recording() as seen:
            result = tool.call(args, key)
        ToolResult(..., exchanges=exchanges_payload(seen, name=...))
    """
    seen: list[Exchange] = []
    token = _recorders.set((*_recorders.get(), seen))
    try:
        yield seen
    finally:
        _recorders.reset(token)


def record(exchange: Exchange) -> None:
    """Hand one exchange to every recording() block it happens inside (none: it is dropped)."""
    for sink in _recorders.get():
        sink.append(exchange)

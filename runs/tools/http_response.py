"""Reading what a target answered: the message of an error body, the external id in a
result, and which headers are worth recording."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

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


def recorded(headers: httpx.Headers) -> dict[str, str]:
    """The headers of RECORDED_HEADERS, lower-cased."""
    return {
        name.lower(): value for name, value in headers.items() if name.lower() in RECORDED_HEADERS
    }


def error_message(response: httpx.Response) -> str:
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


def external_id(data: Any, where: str | Callable[[Any], str]) -> str:
    """The external id at a dotted path into a JSON body ("id", "data.0.id"), or what a
    function of the body says; ValueError when there is none worth the name."""
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

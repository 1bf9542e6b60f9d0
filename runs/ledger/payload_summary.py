"""What an event keeps inline when its payload is stored as an artifact: the few fields that
say what it was, cut short.

A payload above RESUMER_INLINE_PAYLOAD_BYTES goes to an artifact and the event holds
{"stored_as": ..., "bytes": ..., "summary": ...}. The summary is part of the event's hashed
content, so what a row says (which call, which outcome, a ledger edit's before → after and the
start of its reason) stays on the page and under the chain however large the rest was.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

# The payload keys that say what an event was: which effect and call, the tool, its outcome,
# who and why, the branch, how long it took and what it cost. The ledger's own list: a page
# shows a stored payload by these and no others.
ROW_FIELDS = (
    "effect",
    "call",
    "tool",
    "status",
    "external_id",
    "reused",
    "skipped",
    "error",
    "reason",
    "action",
    "by",
    "branch",
    "duration_ms",
    "cost",
)
# A ledger edit's values before and after (three fields today); a few scalar entries each.
CHANGE_FIELDS = ("before", "after")
CHANGE_ENTRIES = 4
NAME_CHARS = 40
TEXT_CHARS = 200


def _short(value: Any) -> Any:
    """A scalar as the row shows it; None for what the row does not show (lists, dicts)."""
    if isinstance(value, str):
        return value if len(value) <= TEXT_CHARS else value[:TEXT_CHARS] + "…"
    if isinstance(value, bool | int | float):
        return value
    return None


def summarize(payload: dict[str, Any]) -> dict[str, Any]:
    """The row's fields of `payload`. Bounded whatever the payload holds: at most
    len(ROW_FIELDS) + 2 * CHANGE_ENTRIES values of TEXT_CHARS characters."""
    summary = {}
    for key in ROW_FIELDS:
        value = _short(payload.get(key))
        if value is not None:
            summary[key] = value
    for key in CHANGE_FIELDS:
        values = payload.get(key)
        if isinstance(values, dict):
            entries = (
                (str(name)[:NAME_CHARS], _short(value))
                for name, value in values.items()
                if _short(value) is not None
            )
            summary[key] = dict(islice(entries, CHANGE_ENTRIES))
    return summary


def cut_strings(result: Any) -> Any:
    """A call's result as its TOOL_RESULT keeps it: long strings cut (the effect keeps the
    whole)."""
    if isinstance(result, dict):
        return {
            k: (v[:200] + "…" if isinstance(v, str) and len(v) > 200 else v)
            for k, v in result.items()
        }
    return result

"""Template helpers for the dashboard.

Nothing here marks text safe: tool results, drafts, titles and payloads come from an agent
and are untrusted, so every helper returns a plain string and autoescaping applies.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone
from django.utils.timesince import timesince

from runs import quantities
from runs.access import roles
from runs.events import TOKEN_KINDS, LedgerEdited
from runs.planning.planner import Action
from runs.planning.replay import StopKind, stop_label

register = template.Library()

PREVIEW_CHARS = 4000


@register.filter
def pretty_json(value: Any, limit: int = PREVIEW_CHARS) -> str:
    """Indented JSON for a <pre>; long values are cut (the admin shows the whole row)."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    limit = int(limit)
    return text if len(text) <= limit else text[:limit] + "\n… (cut)"


@register.filter
def json_value(value: Any) -> str:
    """A JSON value as a reviewer reads it: text as it is, anything else as JSON (a list is
    ["a", "b"], never Python's ['a', 'b'])."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


@register.filter
def is_structured(value: Any) -> bool:
    """A JSON object or list (a typed input's value), which a page shows indented."""
    return isinstance(value, dict | list)


@register.filter
def entries(mapping: Any) -> list[tuple[Any, Any]]:
    """A dict's (key, value) pairs. In a template `mapping.items` looks the key "items" up
    first: a stage output, an input, a form field or an argument of that name would be
    iterated instead of the dict (a 500 on the page that shows it)."""
    return list(mapping.items()) if isinstance(mapping, dict) else []


@register.filter
def by_kind(tokens: Any) -> list[tuple[str, int]]:
    """A usage's tokens in one order, prompt, completion, cached (the kinds it counts)."""
    found = tokens if isinstance(tokens, dict) else {}
    return [(kind, found[kind]) for kind in TOKEN_KINDS if found.get(kind)]


@register.filter
def argument_rules(call: Any, name: str) -> str:
    """An editable argument's kind and rules as its gate recorded them: "decimal, > 0"."""
    about = (call.get("arguments") or {}).get(name) if isinstance(call, dict) else None
    return ", ".join([about["kind"], *about.get("rules", [])]) if about else ""


# Every amount on every page ("$5.00", "$0.0010") and every token count ("1,234"): one
# format per quantity (runs/quantities.py), the one the API and the command line use too.
register.filter("money", quantities.money)
register.filter("tokens", quantities.tokens)


@register.filter
def short(value: Any, length: int = 12) -> str:
    text = "" if value is None else str(value)
    length = int(length)
    return text if len(text) <= length else text[:length] + "…"


@register.filter
def duration(ms: Any) -> str:
    try:
        ms = int(ms)
    except (TypeError, ValueError):
        return ""
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


@register.filter
def ago(moment: datetime | None) -> str:
    """How long ago, at one unit ("3 minutes ago", "2 days ago"): an inbox row says when a
    run stopped at a glance; the exact time is in the <time> element."""
    if moment is None:
        return ""
    if timezone.now() - moment < timedelta(minutes=1):
        return "less than a minute ago"
    return f"{timesince(moment, depth=1)} ago"


@register.filter
def elapsed(delta: timedelta | None) -> str:
    """A span read on the database's clock ("12 s", "4 min", "3 h 5 min", "2 days"): how long
    ago a gate's deadline passed, where a few seconds matter."""
    if delta is None:
        return ""
    seconds = max(int(delta.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        hours, minutes = divmod(seconds // 60, 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days = seconds // 86400
    return f"{days} day{'s' if days != 1 else ''}"


@register.filter
def percent(rate: Any) -> str:
    """0.125 -> "13%"; "" when there is no rate (nothing to divide by)."""
    try:
        return f"{float(rate) * 100:.0f}%"
    except (TypeError, ValueError):
        return ""


ACTION_LABELS = {
    Action.REUSE: "Reuse the recorded result (no call)",
    Action.RETRY_SAME_KEY: "Call again with the same key (the target deduplicates)",
    Action.RECORD_FOUND: "Record what the target has (no call)",
    Action.CALL: "Call",
    Action.SKIP: "Skip (abandoned by a supervisor)",
    Action.BLOCKED: "Blocked: a supervisor decides",
    Action.RERUN: "Run again (pure computation)",
    Action.REJECTED: "Not called (rejected at its confirmation)",
}


@register.filter
def action_label(action: str) -> str:
    return ACTION_LABELS.get(action, action)


@register.filter
def line_action(line: Any) -> str:
    """A plan line's action for people: a refused confirmed call is not a supervisor's to
    resolve in the ledger, but asked again (or the run closed out)."""
    if line.kind == StopKind.REFUSED_CONFIRMED:
        return "Blocked: ask the confirmation again, or close the run out"
    return action_label(line.action)


register.filter("stop_label", stop_label)


# Who may do what, as access/roles.py answers it.
register.filter("role_label", roles.label)
register.filter("can_approve", roles.can_approve)
register.filter("can_edit_ledger", roles.can_edit_ledger)
register.filter("can_manage_queues", roles.can_manage_queues)


@register.filter
def ledger_changes(edit: Any) -> list[tuple[str, Any, Any]]:
    """A ledger edit's (LedgerEdited) changed fields as (field, before, after)."""
    if not isinstance(edit, LedgerEdited):
        return []
    before, after = edit.before, edit.after
    if not isinstance(before, dict) or not isinstance(after, dict):
        return []
    return [
        (name, before.get(name, ""), value)
        for name, value in after.items()
        if before.get(name) != value
    ]


@register.filter
def failing(lines: Any) -> list:
    """The plan's artifact lines that no longer verify."""
    return [line for line in lines or () if not getattr(line, "ok", True)]

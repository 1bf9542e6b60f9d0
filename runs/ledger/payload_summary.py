"""What a call's TOOL_RESULT keeps of its result inline: long strings cut short (the effect row
keeps the whole). What an event keeps inline when its whole payload goes to an artifact is
runs/events.py's (`stored_body`)."""

from __future__ import annotations

from typing import Any


def cut_strings(result: Any) -> Any:
    """A call's result as its TOOL_RESULT keeps it: long strings cut (the effect keeps the
    whole)."""
    if isinstance(result, dict):
        return {
            k: (v[:200] + "…" if isinstance(v, str) and len(v) > 200 else v)
            for k, v in result.items()
        }
    return result

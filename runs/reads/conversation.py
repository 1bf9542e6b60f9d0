"""The run page's conversation section: what each stage said with its model, newest per
stage, read from the artifacts the model tool stored and the turns' events referenced.

Context, never evidence: shown to people, read by nothing that decides (the planner, replay,
the contract). A conversation whose artifact no longer verifies is listed as such."""

from __future__ import annotations

import json
from typing import Any

from runs.events import ToolResult, holding, read
from runs.ledger import artifacts
from runs.models import Event, Run


def conversations(run: Run) -> list[dict[str, Any]]:
    """Per stage that talked to a model, its latest conversation: {stage, call, messages,
    problem}. One query for the events, one read per stage shown."""
    rows = (
        Event.objects.filter(holding(ToolResult, "result", "conversation"), run=run)
        .order_by("-seq")
        .only("type", "stage", "payload")
    )
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        stage, said = row.stage, read(row)
        if stage in latest:
            continue
        ref = said.result["conversation"]
        entry = {"stage": stage, "call": said.call, "messages": [], "problem": ""}
        try:
            data = json.loads(artifacts.read_verified(ref["uri"], ref["sha256"]))
            entry["messages"] = [_shown(m) for m in data.get("messages", [])]
        except Exception as exc:  # deleted or altered: say so, never show unverified text
            entry["problem"] = f"this conversation no longer verifies ({type(exc).__name__})"
        latest[stage] = entry
    return list(reversed(latest.values()))


def _shown(message: dict[str, Any]) -> dict[str, str]:
    calls = message.get("tool_calls") or []
    asked = ", ".join(
        f"{c.get('function', {}).get('name', '')}({c.get('function', {}).get('arguments', '')})"
        for c in calls
    )
    return {
        "role": str(message.get("name") or message.get("role", "")),
        "content": str(message.get("content") or (f"asks for {asked}" if asked else "")),
    }

"""Events for the tests that drive the ledger by hand, built through their classes
(runs/events.py) as every writer builds them: the payload is what the class writes."""

from __future__ import annotations

from typing import Any

from runs.events import Started, ToolCalled, ToolResult


def started(stage: str = "research", **fields: Any) -> Started:
    """A stage's STARTED, as a worker holding token 1 writes it."""
    return Started(**{"stage": stage, "worker": "worker:test", "token": 1, "attempt": 0, **fields})


def called(n: int = 1, stage: str = "research", **fields: Any) -> ToolCalled:
    """The n-th call's TOOL_CALLED: a SAFE call, its arguments {"n": n} unless `fields` say."""
    defaults = {"call": f"call-{n}", "tool": "search", "policy": "safe", "args": {"n": n}}
    return ToolCalled(**{"stage": stage, **defaults, **fields})


def result(n: int = 1, stage: str = "research", **fields: Any) -> ToolResult:
    """The n-th call's TOOL_RESULT: its result {"n": n} unless `fields` say."""
    defaults = {"call": f"call-{n}", "tool": "search", "result": {"n": n}}
    return ToolResult(**{"stage": stage, **defaults, **fields})

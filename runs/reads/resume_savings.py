"""What resuming saved on the pipeline page: the effects a resume reused (or found on the
target) instead of making them again after a crash, each at the call's recorded price, with
the model tokens a reused model turn did not spend again.

A reuse is a saving only where the effect was made before the approval that resumed the run
(or by another run, for a branch), and only the first reuse of a key after that approval: a
stage that runs again after a gate's answer reuses (or replays) what it made moments before,
which saves nothing a person would otherwise have paid. Those are counted apart, as replays
after a gate. A call the ledger settled without a price (a supervisor confirmed it by hand)
is priced by its request, as its plan priced it (Tool.price_of).

One query over the window's reuse events; pricing is the pipeline's, in Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import connection

from runs.events import Reconciled, ToolResult, sql_true
from runs.pipeline import Pipeline

# Per reuse event (a reused TOOL_RESULT, a RECONCILED that found the effect): whether it is
# a resume's saving (1) or a replay after a gate (0), with its effect's price and request.
REUSES_SQL = """
WITH {recent}
SELECT e.run_id, e.stage, f.tool, f.delivery_key, f.cost, f.request, f.result,
  CASE WHEN f.run_id <> e.run_id OR EXISTS (
    SELECT 1 FROM {event_t} a
    WHERE a.run_id = e.run_id AND a.type = 'PLAN_APPROVED' AND a.seq < e.seq
      AND a.created_at > f.created_at
      AND NOT EXISTS (
        SELECT 1 FROM {event_t} b
        WHERE b.run_id = e.run_id AND b.seq > a.seq AND b.seq < e.seq
          AND b.idempotency_key = e.idempotency_key AND b.type IN ('TOOL_RESULT', 'RECONCILED')
      )
  ) THEN 1 ELSE 0 END AS saved
FROM {event_t} e
JOIN {effect_t} f ON f.delivery_key = e.idempotency_key
WHERE {in_window}
  AND ((e.type = 'TOOL_RESULT' AND {reused}) OR (e.type = 'RECONCILED' AND {found}))
UNION ALL
SELECT e.run_id, e.stage, '', '', 0, NULL, NULL, 0 FROM {event_t} e
WHERE {in_window} AND e.type = 'TOOL_RESULT' AND {replayed}
"""


@dataclass
class Saved:
    """Per stage: what resuming saved, and what re-entries after gates replayed."""

    calls: int = 0
    money: Decimal = Decimal(0)
    tokens: int = 0
    replayed_after_gates: int = 0
    keys: set[tuple[int, str]] = field(default_factory=set)


def by_stage(pipeline: Pipeline, sql: str, params: list) -> dict[str, Saved]:
    """`sql` is REUSES_SQL with the window filled in (stats._sql)."""
    found: dict[str, Saved] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    for run_id, stage, tool_name, key, cost, request, result, saved in rows:
        s = found.setdefault(stage, Saved())
        if not saved or (run_id, key) in s.keys:
            # A reuse after a gate, a key already counted, or a result replayed: not a saving.
            s.replayed_after_gates += 1
            continue
        s.keys.add((run_id, key))
        tool = _tool(pipeline, tool_name)
        price = Decimal(str(cost or 0))
        if not price and tool is not None:
            price = tool.price_of(_json(request))
        s.calls += 1
        s.money += price
        answer = _json(result)
        if tool is not None and tool.metered is not None and answer is not None:
            # A reused model turn's tokens, as its answer said (prompt and completion; the
            # cached ones are part of the prompt).
            _, tokens = tool.metered(answer)
            s.tokens += sum(int(n) for kind, n in tokens.items() if kind != "cached")
    return found


def exprs() -> dict[str, str]:
    vendor, col = connection.vendor, "e.payload"
    return {
        "reused": sql_true(vendor, col, ToolResult, "reused"),
        "found": sql_true(vendor, col, Reconciled, "found"),
        "replayed": sql_true(vendor, col, ToolResult, "replayed"),
    }


def _tool(pipeline: Pipeline, name: str):
    try:
        return pipeline.tool(name)
    except KeyError:
        return None  # a tool the pipeline no longer declares: its recorded cost stands


def _json(value):
    # SQLite hands JSON columns back as text; PostgreSQL's driver decodes them.
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value

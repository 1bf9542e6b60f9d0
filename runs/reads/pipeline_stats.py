"""Pipeline statistics: where checkpoints pay, read from a pipeline's own recent runs.

Per stage, over the last N runs of a pipeline:

* how long an attempt takes: STARTED to the VERIFIED or FAILED that ends it (median, p95);
* what it spends: the cost and model tokens each TOOL_RESULT records (a reused effect records
  none);
* how often it is interrupted or fails;
* what resumes saved: the stages a strict resume skipped, and the confirmed effects a
  re-executed stage reused instead of calling again.

Each figure set is one aggregate query over the last N runs' events, whatever the number of
runs or events in the database: attempts (the duration chart), spending and reused effects
(the spend chart), skipped stages (with the reused effects, the savings chart). Nothing here
writes or calls a tool. The SQL is per vendor only where SQLite and PostgreSQL spell things
differently: a JSON key, a time difference, how the window's runs select their events (each
run's events through the (run, seq) index, so the page costs what its window holds, not what
the database holds; bench/pages.py --window-ratio). The window's runs are found by walking the
primary key backwards, which stays short while a database holds a few pipelines (a rare
pipeline among many would want an index on (pipeline, -id)).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from django.db import connection

from runs import quantities
from runs.events import ToolResult, sql_text, sql_text_at, sql_true
from runs.models import Effect, Event, ReplayPolicy, Run
from runs.pipeline import Pipeline, UnknownPipeline, registry
from runs.reads import resume_savings

# How many recent runs the page may look at; the form offers exactly these.
WINDOWS = (10, 25, 50, 100, 250, 500)
DEFAULT_WINDOW = 100

# Where a checkpoint pays (the protocol: "a stage that is long, costly, verifiable, or changes
# the outside world"). Losing a stage's work costs its money again, its time again, or a
# second effect outside; below both thresholds and with SAFE tools only, running it again is
# cheaper than a checkpoint's artifacts and checks.
COSTLY_FROM = Decimal("0.05")  # money per attempt, in the tools' currency
LONG_FROM_MS = 10_000  # p95 duration of an attempt

CENT = Decimal("0.0001")
ZERO = Decimal("0.0000")  # money is shown to four places, like the plan's costs


class CheckpointVerdict(StrEnum):
    """Whether a checkpoint at a stage is worth its artifacts and checks."""

    PAYS = "checkpoint pays"
    OPTIONAL = "checkpoint optional"


@dataclass
class StageStats:
    stage: str
    # Attempts = STARTED events; their outcomes as the next stage-ending event says.
    attempts: int = 0
    verified: int = 0
    failed: int = 0  # FAILED, or stopped for a human (NEEDS_APPROVAL)
    interrupted: int = 0  # while executing, or while queued (lost before STARTED)
    lost_in_queue: int = 0
    median_ms: int | None = None
    p95_ms: int | None = None
    timed: int = 0  # attempts that ended VERIFIED or FAILED: the duration's sample
    spent: Decimal = ZERO
    paid_calls: int = 0
    tokens: int = 0  # model tokens (prompt and completion) of those calls
    # Saved by checkpoints: how many strict resumes skipped this stage, and the paid calls
    # (and their cost) the stage had made in that run before each of them.
    skipped: int = 0
    skipped_calls: int = 0
    skipped_money: Decimal = ZERO
    skipped_tokens: int = 0  # the model tokens of those calls
    # Saved by resuming (resume_savings.py): effects made before a resume and reused or found
    # on the target instead of made again, at their recorded price, and the model tokens of
    # reused turns; and what runs again after a gate handed back (not a saving).
    reused_calls: int = 0
    reused_money: Decimal = ZERO
    reused_tokens: int = 0
    replayed_after_gates: int = 0
    declared_cost: Decimal = ZERO  # what the stage's declared calls cost, once
    tools: list[str] = field(default_factory=list)  # the tools the stage may call
    outside_tools: list[str] = field(default_factory=list)  # "upload_asset (IDEMPOTENT)"
    verdict: CheckpointVerdict = CheckpointVerdict.OPTIONAL
    reasons: list[str] = field(default_factory=list)

    @property
    def tries(self) -> int:
        """Denominator of the rates: attempts, plus queued attempts lost before they started."""
        return self.attempts + self.lost_in_queue

    @property
    def failure_rate(self) -> float | None:
        return self.failed / self.attempts if self.attempts else None

    @property
    def interruption_rate(self) -> float | None:
        return self.interrupted / self.tries if self.tries else None

    @property
    def cost_per_attempt(self) -> Decimal:
        """Measured when the stage ran in the window, else what its declared calls cost."""
        if self.attempts:
            return (self.spent / self.attempts).quantize(CENT)
        return self.declared_cost

    @property
    def saved_calls(self) -> int:
        return self.skipped_calls + self.reused_calls

    @property
    def saved_money(self) -> Decimal:
        return self.skipped_money + self.reused_money

    @property
    def saved_tokens(self) -> int:
        return self.skipped_tokens + self.reused_tokens


def _summed(name: str, zero: Decimal | int = 0) -> property:
    """A figure of the whole pipeline: the sum of its stages' own."""
    return property(lambda stats: sum((getattr(s, name) for s in stats.stages), zero))


@dataclass
class PipelineStats:
    pipeline: Pipeline
    window: int
    runs: int  # runs actually in the window (fewer than `window` when the pipeline is young)
    first_run: int | None
    last_run: int | None
    stages: list[StageStats]

    spent = _summed("spent", ZERO)
    saved_money = _summed("saved_money", ZERO)
    saved_tokens = _summed("saved_tokens")
    replayed_after_gates = _summed("replayed_after_gates")
    tokens = _summed("tokens")
    saved_calls = _summed("saved_calls")


# --- SQL -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Dialect:
    ms_between: str  # "{a}" to "{b}" in whole milliseconds
    money: str  # a text expression "{x}" as a number, 0 when it is not one
    in_window: str  # the event `e` is of a run in the window (`recent`)


def _dialect() -> _Dialect:
    if connection.vendor == "postgresql":
        return _Dialect(
            ms_between="CAST(ROUND(EXTRACT(EPOCH FROM ({b} - {a})) * 1000) AS BIGINT)",
            money="(CASE WHEN {x} ~ '^[0-9]+(\\.[0-9]+)?$' THEN CAST({x} AS NUMERIC) ELSE 0 END)",
            # Not `IN (SELECT id FROM recent)`: PostgreSQL plans that as a hash semi join
            # over a sequential scan of every event (the window's 500 runs took 0.25 s at
            # 100k events, 1.3 s at 1M; EXPLAIN in docs/benchmarks.md). An array of the ids
            # is looked up in the (run, seq) index, reading the window's events alone.
            in_window="e.run_id = ANY(ARRAY(SELECT id FROM recent))",
        )
    # SQLite keeps timestamps as ISO text (julianday reads them).
    return _Dialect(
        ms_between="CAST(ROUND((julianday({b}) - julianday({a})) * 86400000.0) AS INTEGER)",
        money="CAST(COALESCE({x}, 0) AS NUMERIC)",
        # SQLite looks each of the subquery's ids up in the (run, seq) index.
        in_window="e.run_id IN (SELECT id FROM recent)",
    )


def _names() -> dict[str, str]:
    qn = connection.ops.quote_name
    return {
        "run_t": qn(Run._meta.db_table),
        "event_t": qn(Event._meta.db_table),
        "effect_t": qn(Effect._meta.db_table),
    }


# The last N runs of the pipeline, newest first: a walk down the primary key.
RECENT = "recent AS (SELECT id FROM {run_t} WHERE pipeline = %s ORDER BY id DESC LIMIT %s)"

# Attempts and their outcomes, and the duration percentiles (nearest rank) of those that
# ended VERIFIED or FAILED. Only stage-boundary events are read; within one run they are
# strictly sequential, so the boundary after a STARTED is how that attempt ended.
ATTEMPTS_SQL = """
WITH {recent},
marks AS (
  SELECT e.stage, e.type, e.created_at,
    LEAD(e.type) OVER (PARTITION BY e.run_id ORDER BY e.seq) AS next_type,
    LEAD(e.created_at) OVER (PARTITION BY e.run_id ORDER BY e.seq) AS next_at,
    LAG(e.type) OVER (PARTITION BY e.run_id ORDER BY e.seq) AS prev_type
  FROM {event_t} e
  WHERE {in_window}
    AND e.type IN ('STARTED', 'VERIFIED', 'FAILED', 'INTERRUPTED', 'NEEDS_APPROVAL')
),
timed AS (
  SELECT stage, {ms} AS ms FROM marks
  WHERE type = 'STARTED' AND next_type IN ('VERIFIED', 'FAILED')
),
ranked AS (
  SELECT stage, ms,
    ROW_NUMBER() OVER (PARTITION BY stage ORDER BY ms) AS rn,
    COUNT(*) OVER (PARTITION BY stage) AS n
  FROM timed
),
pct AS (
  SELECT stage, MAX(n) AS n,
    MAX(CASE WHEN rn = (n + 1) / 2 THEN ms END) AS median_ms,
    MAX(CASE WHEN rn = (95 * n + 99) / 100 THEN ms END) AS p95_ms
  FROM ranked GROUP BY stage
),
outcomes AS (
  SELECT stage,
    SUM(CASE WHEN type = 'STARTED' THEN 1 ELSE 0 END) AS attempts,
    SUM(CASE WHEN type = 'STARTED' AND next_type = 'VERIFIED' THEN 1 ELSE 0 END) AS verified,
    SUM(CASE WHEN type = 'STARTED' AND next_type IN ('FAILED', 'NEEDS_APPROVAL')
        THEN 1 ELSE 0 END) AS failed,
    SUM(CASE WHEN type = 'INTERRUPTED' THEN 1 ELSE 0 END) AS interrupted,
    SUM(CASE WHEN type = 'INTERRUPTED' AND (prev_type IS NULL OR prev_type <> 'STARTED')
        THEN 1 ELSE 0 END) AS lost_in_queue
  FROM marks GROUP BY stage
)
SELECT o.stage, o.attempts, o.verified, o.failed, o.interrupted, o.lost_in_queue,
  p.median_ms, p.p95_ms, COALESCE(p.n, 0)
FROM outcomes o LEFT JOIN pct p ON p.stage = o.stage
"""

# Money spent, model tokens used and paid calls: every TOOL_RESULT that was a call (not a reused
# effect, not an abandoned one, not a result a stage run again replayed), at the cost and usage
# it recorded. What reuses saved is resume_savings.py's.
SPEND_SQL = """
WITH {recent}
SELECT e.stage,
  SUM(CASE WHEN {not_made} THEN 0 ELSE 1 END) AS calls,
  SUM(CASE WHEN {not_made} THEN 0 ELSE {cost} END) AS spent,
  SUM(CASE WHEN {not_made} THEN 0 ELSE {tokens} END) AS tokens
FROM {event_t} e
WHERE {in_window} AND e.type = 'TOOL_RESULT'
GROUP BY e.stage
"""

# What checkpoints saved, as (kind, stage, count, money, tokens) rows:
#   resumed-at  strict resumes restarting at this stage (every stage before it was skipped);
#   skipped     per skipped stage, the distinct calls it had paid for in that run before the
#               resume (a call made twice counts once, at its highest recorded cost and
#               model tokens).
SAVINGS_SQL = """
WITH {recent},
stage_order(stage, idx) AS (VALUES {order}),
resumes AS (
  SELECT e.run_id, e.seq, e.stage AS restart FROM {event_t} e
  WHERE {in_window} AND e.type = 'RESUMED'
),
paid AS (
  SELECT e.run_id, e.seq, e.stage, {call} AS call_id, {cost} AS cost, {tokens} AS tokens
  FROM {event_t} e
  WHERE e.run_id IN (SELECT run_id FROM resumes) AND e.type = 'TOOL_RESULT'
    AND (CASE WHEN {reused} OR {skipped} THEN 0 ELSE 1 END) = 1
),
skipped_calls AS (
  SELECT p.stage, r.run_id, r.seq, p.call_id, MAX(p.cost) AS cost, MAX(p.tokens) AS tokens
  FROM resumes r
  JOIN stage_order ro ON ro.stage = r.restart
  JOIN paid p ON p.run_id = r.run_id AND p.seq < r.seq
  JOIN stage_order po ON po.stage = p.stage AND po.idx < ro.idx
  GROUP BY p.stage, r.run_id, r.seq, p.call_id
)
SELECT 'resumed-at', restart, COUNT(*), 0, 0 FROM resumes GROUP BY restart
UNION ALL
SELECT 'skipped', stage, COUNT(*), SUM(cost), SUM(tokens) FROM skipped_calls GROUP BY stage
"""

WINDOW_SQL = "WITH {recent} SELECT COUNT(*), MIN(id), MAX(id) FROM recent"


def _sql(template: str, **extra: str) -> str:
    names = _names()
    recent = RECENT.format(**names)
    return template.format(recent=recent, in_window=_dialect().in_window, **names, **extra)


def _payload_exprs() -> dict[str, str]:
    """A TOOL_RESULT's fields in the SQL above (runs/events.py's JSON expressions)."""
    vendor, col = connection.vendor, "e.payload"
    return {
        "reused": sql_true(vendor, col, ToolResult, "reused"),
        "skipped": sql_true(vendor, col, ToolResult, "skipped"),
        # Neither made nor paid: a reused effect, an abandoned one, a replayed result.
        "not_made": " OR ".join(
            sql_true(vendor, col, ToolResult, name) for name in ("reused", "skipped", "replayed")
        ),
        "cost": _dialect().money.format(x=sql_text(vendor, col, ToolResult, "cost")),
        "call": sql_text(vendor, col, ToolResult, "call"),
        # A metered call's prompt and completion tokens (the cached are part of the prompt).
        "tokens": " + ".join(
            f"COALESCE(CAST({sql_text_at(vendor, col, ToolResult, 'usage', kind)} AS BIGINT), 0)"
            for kind in ("prompt", "completion")
        ),
    }


def _money(value) -> Decimal:
    # SQLite sums NUMERIC text as floating point; money is shown to four places anyway.
    return Decimal(str(value or 0)).quantize(CENT)


def _fetch(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def attempt_rows(pipeline: Pipeline, window: int) -> list[tuple]:
    ms = _dialect().ms_between.format(a="created_at", b="next_at")
    return _fetch(_sql(ATTEMPTS_SQL, ms=ms), [pipeline.name, window])


def spend_rows(pipeline: Pipeline, window: int) -> list[tuple]:
    return _fetch(_sql(SPEND_SQL, **_payload_exprs()), [pipeline.name, window])


def savings_rows(pipeline: Pipeline, window: int) -> list[tuple]:
    names = pipeline.stage_names
    order = ", ".join(["(%s, %s)"] * len(names))
    params: list = [pipeline.name, window]
    for index, name in enumerate(names):
        params += [name, index]
    return _fetch(_sql(SAVINGS_SQL, order=order, **_payload_exprs()), params)


# --- The figures -----------------------------------------------------------------------------


def get_pipeline(name: str) -> Pipeline | None:
    try:
        return registry.get(name)
    except UnknownPipeline:
        return None


def pipeline_stats(pipeline: Pipeline, window: int = DEFAULT_WINDOW) -> PipelineStats:
    """Every stage's figures over the pipeline's last `window` runs: four queries (the three
    figure sets and the window itself)."""
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {WINDOWS}")
    stages = {name: StageStats(name) for name in pipeline.stage_names}

    for stage, attempts, verified, failed, interrupted, lost, median, p95, n in attempt_rows(
        pipeline, window
    ):
        if stage in stages:
            s = stages[stage]
            s.attempts, s.verified, s.failed = int(attempts), int(verified), int(failed)
            s.interrupted, s.lost_in_queue, s.timed = int(interrupted), int(lost), int(n)
            s.median_ms = None if median is None else int(median)
            s.p95_ms = None if p95 is None else int(p95)

    for stage, calls, spent, tokens in spend_rows(pipeline, window):
        if stage in stages:
            s = stages[stage]
            s.paid_calls, s.spent, s.tokens = int(calls or 0), _money(spent), int(tokens or 0)
    reuses = _sql(resume_savings.REUSES_SQL, **resume_savings.exprs())
    for stage, saved in resume_savings.by_stage(pipeline, reuses, [pipeline.name, window]).items():
        if stage in stages:
            s = stages[stage]
            s.reused_calls, s.reused_money = saved.calls, _money(saved.money)
            s.reused_tokens, s.replayed_after_gates = saved.tokens, saved.replayed_after_gates

    order = list(pipeline.stage_names)
    for kind, stage, count, money, tokens in savings_rows(pipeline, window):
        if kind == "resumed-at" and stage in stages:
            for skipped in order[: order.index(stage)]:
                stages[skipped].skipped += int(count)
        elif kind == "skipped" and stage in stages:
            s = stages[stage]
            s.skipped_calls, s.skipped_money = int(count), _money(money)
            s.skipped_tokens = int(tokens or 0)

    for spec in pipeline.stages:
        s = stages[spec.name]
        s.declared_cost = sum(
            (pipeline.tool(call.tool).cost for call in spec.calls), Decimal(0)
        ).quantize(CENT)
        s.tools = list(spec.tools)
        s.outside_tools = [
            f"{tool.name} ({tool.policy})"
            for tool in (pipeline.tool(name) for name in spec.tools)
            if tool.policy != ReplayPolicy.SAFE
        ]
        s.verdict, s.reasons = classify(s)

    count, first, last = _fetch(_sql(WINDOW_SQL), [pipeline.name, window])[0]
    return PipelineStats(
        pipeline=pipeline,
        window=window,
        runs=int(count),
        first_run=first,
        last_run=last,
        stages=[stages[name] for name in pipeline.stage_names],
    )


def _duration(ms: int) -> str:
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def classify(s: StageStats) -> tuple[CheckpointVerdict, list[str]]:
    """ "checkpoint pays" when the stage is costly, long, or changes the outside world (any
    tool that is not SAFE); "checkpoint optional" otherwise. Returns the verdict and why."""
    measured = "per attempt" if s.attempts else "declared, per execution"
    cost = s.cost_per_attempt
    pays: list[str] = []
    if s.outside_tools:
        pays.append(f"changes the outside world: {', '.join(s.outside_tools)}")
    if cost >= COSTLY_FROM:
        pays.append(
            f"costly: {quantities.money(cost)} {measured} ≥ {quantities.money(COSTLY_FROM)}"
        )
    if s.p95_ms is not None and s.p95_ms >= LONG_FROM_MS:
        pays.append(f"long: p95 {_duration(s.p95_ms)} ≥ {_duration(LONG_FROM_MS)}")
    if pays:
        return CheckpointVerdict.PAYS, pays
    duration = (
        f"short: p95 {_duration(s.p95_ms)} < {_duration(LONG_FROM_MS)}"
        if s.p95_ms is not None
        else "duration not measured yet"
    )
    return CheckpointVerdict.OPTIONAL, [
        f"cheap: {quantities.money(cost)} {measured} < {quantities.money(COSTLY_FROM)}",
        duration,
        "side-effect free: SAFE tools only" if s.tools else "side-effect free: calls no tool",
    ]

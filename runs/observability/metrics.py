"""Every figure /metrics serves, computed from the database at scrape time.

Why not prometheus_client's own counters: stage jobs, tool calls and the sweeper run in worker
processes, on several machines, that are SIGKILLed when they die; an in-process counter (or
the multiprocess mode's files, one directory per host) would lose what a killed worker counted
and could never add up the machines. The event log already records every one of these facts
exactly once, in every process's name, and survives restarts. So the counters are counts of
events (monotonic: the log is append-only), the histograms are SQL-bucketed over event pairs,
and the gauges are counts of rows now. Every web replica serves the same figures.

Seven queries per scrape whatever the number of runs, each a GROUP BY that returns at most
one row per label set: runs, open gates, the counted events, model spend, stage durations,
detection latencies, notification deliveries. The event queries scan the event table (it has no index
on type, on purpose: the hot path pays for every index), which stays in the milliseconds for
thousands of runs; docs/monitoring.md says what to do past that. Payload fields are read
through runs/events.py's query helpers (JSON key lookups that Django compiles for SQLite and
PostgreSQL alike; a payload stored as an artifact is read from its inline summary).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import timedelta

from django.db.models import (
    BigIntegerField,
    Case,
    CharField,
    Count,
    DateTimeField,
    DecimalField,
    DurationField,
    ExpressionWrapper,
    F,
    Min,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast
from django.utils import timezone
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from runs import events
from runs.events import TOKEN_KINDS, Diverged, Failed, Interrupted, PlanApproved, ToolResult
from runs.models import Delivery, Event, Gate, Run
from runs.pipeline import registry

# A TOOL_RESULT's cost (text of a decimal), summed as money.
MONEY = DecimalField(max_digits=20, decimal_places=6)

# Stage durations (STARTED → VERIFIED of one attempt), seconds.
STAGE_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# The sweeper's detection latency (INTERRUPTED after the lease ran out), seconds: a healthy
# deployment sees at most one sweep interval (15 s by default).
DETECTION_BUCKETS = (0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 120, 300, 900)

Type = Event.Type
COUNTED = (
    Type.TOOL_RESULT,
    Type.FAILED,
    Type.PLAN_APPROVED,
    Type.PLAN_KEPT,
    Type.PLAN_DEVIATED,
    Type.DIVERGED,
)


# The counters of events(): each one's help and labels.
EVENT_COUNTERS = {
    "resumer_tool_calls": (
        "Tool calls by outcome: ok (SAFE), confirmed, failed (rejected), unknown, conflict; "
        "reused and skipped were answered from the ledger without a call, replayed from what "
        "the stage recorded earlier in the run.",
        ["pipeline", "tool", "policy", "outcome"],
    ),
    "resumer_resumes": (
        "Approved resumes (PLAN_APPROVED) by mode: strict or upgrade.",
        ["pipeline", "mode"],
    ),
    "resumer_plan_verdicts": (
        "Resumed work held against its plan: kept (PLAN_KEPT) or deviated (PLAN_DEVIATED).",
        ["pipeline", "verdict"],
    ),
    "resumer_divergences": (
        "Calls a stage run again in the same run asked for with another request than it "
        "recorded (DIVERGED): stopped before the call, or recorded and made.",
        ["pipeline", "tool", "outcome"],
    ),
    "resumer_interruptions": (
        "Runs interrupted (worker lost, job lost, database lost) by the stage they were in.",
        ["pipeline", "stage"],
    ),
}


def _outcome() -> Case:
    """A tool call's outcome from its TOOL_RESULT or FAILED event."""
    return Case(
        # A divergence: the stage stopped before the call, or recorded it and went on.
        When(Q(type=Type.DIVERGED) & events.flag("stopped", Diverged), then=Value("stopped")),
        When(type=Type.DIVERGED, then=Value("recorded")),
        When(events.flag("reused", ToolResult), then=Value("reused")),
        When(events.flag("replayed", ToolResult), then=Value("replayed")),
        When(events.flag("skipped", ToolResult), then=Value("skipped")),
        When(
            events.present("status", ToolResult, Failed),
            then=events.text("status", ToolResult, Failed),
        ),
        default=Value("ok"),
        output_field=CharField(),
    )


def _seconds(value: timedelta | None) -> float:
    return 0.0 if value is None else value.total_seconds()


def _histogram(
    family: HistogramMetricFamily, labels: list[str], row: dict, bounds: Iterable[float]
) -> None:
    buckets = [(_le(b), row[f"le_{i}"]) for i, b in enumerate(bounds)]
    family.add_metric(labels, [*buckets, ("+Inf", row["n"])], _seconds(row["total"]))


def _le(bound: float) -> str:
    return str(float(bound))


def _bucket_counts(duration: str, bounds: Iterable[float]) -> dict:
    counts = {
        f"le_{i}": Count("pk", filter=Q(**{f"{duration}__lte": timedelta(seconds=b)}))
        for i, b in enumerate(bounds)
    }
    return {**counts, "n": Count("pk"), "total": Sum(duration)}


class ResumerCollector(Collector):
    """The figures of docs/monitoring.md, read when collected (never at registration)."""

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        yield from self.runs()
        yield from self.gates()
        yield from self.events()
        yield from self.model_spend()
        yield self.stage_durations()
        yield self.detection_latency()
        yield self.deliveries()
        took = GaugeMetricFamily(
            "resumer_metrics_scrape_seconds", "How long computing these figures took."
        )
        took.add_metric([], time.monotonic() - started)
        yield took

    def runs(self) -> Iterator[Metric]:
        now = timezone.now()
        rows = Run.objects.values("pipeline", "status").annotate(
            n=Count("pk"),
            human=Count("pk", filter=Q(attention=0)),
            oldest=Min("updated_at", filter=Q(attention=0)),
        )
        runs = GaugeMetricFamily(
            "resumer_runs", "Runs by pipeline and status, now.", labels=["pipeline", "status"]
        )
        human = GaugeMetricFamily(
            "resumer_runs_needing_human",
            "Runs that wait for a human (the inbox's needs-a-human set), by status.",
            labels=["pipeline", "status"],
        )
        oldest = GaugeMetricFamily(
            "resumer_runs_needing_human_oldest_seconds",
            "Seconds since the longest-waiting of those runs last changed.",
            labels=["pipeline", "status"],
        )
        for row in rows.order_by():
            labels = [row["pipeline"], row["status"]]
            runs.add_metric(labels, row["n"])
            if row["human"]:
                human.add_metric(labels, row["human"])
                oldest.add_metric(labels, max(0.0, (now - row["oldest"]).total_seconds()))
        yield from (runs, human, oldest)

    def gates(self) -> Iterator[Metric]:
        now = timezone.now()
        rows = (
            Gate.objects.filter(status=Gate.Status.OPEN)
            .values("run__pipeline", "kind", "role")
            .annotate(n=Count("pk"), oldest=Min("created_at"))
            .order_by()
        )
        labels = ["pipeline", "kind", "role"]
        count = GaugeMetricFamily(
            "resumer_gates_open", "Gates waiting for an answer, now.", labels=labels
        )
        age = GaugeMetricFamily(
            "resumer_gate_oldest_open_seconds",
            "Seconds the longest-waiting open gate has waited.",
            labels=labels,
        )
        for row in rows:
            values = [row["run__pipeline"], row["kind"], row["role"]]
            count.add_metric(values, row["n"])
            age.add_metric(values, max(0.0, (now - row["oldest"]).total_seconds()))
        yield from (count, age)

    def events(self) -> Iterator[Metric]:
        """The counters: one GROUP BY over the counted event types."""
        rows = (
            Event.objects.filter(Q(type__in=COUNTED) | Q(type=Type.INTERRUPTED))
            # A stage's failure, not a call's.
            .exclude(Q(type=Type.FAILED) & ~events.present("call", Failed))
            .values("type", "stage", pipeline=F("run__pipeline"))
            .annotate(
                tool=events.text("tool", ToolResult, Failed, Diverged),
                outcome=_outcome(),
                action=events.text("action", PlanApproved),
                n=Count("pk"),
            )
            .order_by()
        )
        calls: dict[tuple, int] = defaultdict(int)
        modes: dict[tuple, int] = defaultdict(int)
        verdicts: dict[tuple, int] = defaultdict(int)
        stops: dict[tuple, int] = defaultdict(int)
        diverged: dict[tuple, int] = defaultdict(int)
        for row in rows:
            pipeline, kind = row["pipeline"], row["type"]
            if kind in (Type.TOOL_RESULT, Type.FAILED):
                tool = row["tool"] or ""
                calls[pipeline, tool, _policy(pipeline, tool), row["outcome"]] += row["n"]
            elif kind == Type.PLAN_APPROVED:
                modes[pipeline, row["action"] or ""] += row["n"]
            elif kind == Type.INTERRUPTED:
                stops[pipeline, row["stage"]] += row["n"]
            elif kind == Type.DIVERGED:
                diverged[pipeline, row["tool"] or "", row["outcome"]] += row["n"]
            else:
                verdict = "kept" if kind == Type.PLAN_KEPT else "deviated"
                verdicts[pipeline, verdict] += row["n"]
        counted = {"resumer_tool_calls": calls, "resumer_resumes": modes}
        counted |= {"resumer_plan_verdicts": verdicts, "resumer_divergences": diverged}
        counted["resumer_interruptions"] = stops
        for name, values in counted.items():
            doc, labels = EVENT_COUNTERS[name]
            yield _counter(name, doc, labels, values)

    def model_spend(self) -> Iterator[Metric]:
        """Metered calls (a model's) by pipeline and model: their tokens by kind and the
        money they cost, from each call's TOOL_RESULT (a call reused on a resume records
        none: it was not billed again)."""
        rows = (
            Event.objects.filter(events.present("usage", ToolResult), type=Type.TOOL_RESULT)
            .annotate(model_name=events.text("model", ToolResult))
            .values("model_name", pipeline=F("run__pipeline"))
            .annotate(
                n=Count("pk"),
                money=Sum(Cast(events.text("cost", ToolResult), MONEY)),
                **{
                    kind: Sum(Cast(events.text_at("usage", kind, ToolResult), BigIntegerField()))
                    for kind in TOKEN_KINDS
                },
            )
            .order_by()
        )
        labels = ["pipeline", "model"]
        calls = CounterMetricFamily(
            "resumer_model_calls", "Model calls answered (and billed).", labels=labels
        )
        tokens = CounterMetricFamily(
            "resumer_model_tokens",
            "Tokens model calls used, by kind: prompt, completion, cached (part of the prompt).",
            labels=[*labels, "kind"],
        )
        money = CounterMetricFamily(
            "resumer_model_spend_dollars",
            "What model calls cost, in the price table's dollars.",
            labels=labels,
        )
        for row in sorted(rows, key=lambda r: (r["pipeline"], r["model_name"] or "")):
            values = [row["pipeline"], row["model_name"] or ""]
            calls.add_metric(values, row["n"])
            money.add_metric(values, float(row["money"] or 0))
            for kind in TOKEN_KINDS:
                tokens.add_metric([*values, kind], int(row[kind] or 0))
        yield from (calls, tokens, money)

    def stage_durations(self) -> Metric:
        """STARTED → VERIFIED of each stage attempt that verified, bucketed in SQL."""
        started_at = Subquery(
            Event.objects.filter(
                run=OuterRef("run"),
                stage=OuterRef("stage"),
                type=Type.STARTED,
                seq__lt=OuterRef("seq"),
            )
            .order_by("-seq")
            .values("created_at")[:1]
        )
        rows = (
            Event.objects.filter(type=Type.VERIFIED)
            .annotate(
                took=ExpressionWrapper(F("created_at") - started_at, output_field=DurationField())
            )
            .values("stage", pipeline=F("run__pipeline"))
            .annotate(**_bucket_counts("took", STAGE_BUCKETS))
            .order_by()
        )
        family = HistogramMetricFamily(
            "resumer_stage_duration_seconds",
            "Stage attempts that verified: seconds from STARTED to VERIFIED.",
            labels=["pipeline", "stage"],
        )
        for row in rows:
            _histogram(family, [row["pipeline"], row["stage"]], row, STAGE_BUCKETS)
        return family

    def detection_latency(self) -> Metric:
        """INTERRUPTED minus the lease expiry the sweeper found (its payload's
        lease_expired_at): how long a dead worker's run went unnoticed."""
        expired = Cast(events.text("lease_expired_at", Interrupted), DateTimeField())
        rows = (
            Event.objects.filter(
                events.present("lease_expired_at", Interrupted), type=Type.INTERRUPTED
            )
            .annotate(
                late=ExpressionWrapper(F("created_at") - expired, output_field=DurationField())
            )
            .values(pipeline=F("run__pipeline"))
            .annotate(**_bucket_counts("late", DETECTION_BUCKETS))
            .order_by()
        )
        family = HistogramMetricFamily(
            "resumer_interruption_detection_seconds",
            "Seconds from a worker's lease running out to the sweeper's INTERRUPTED.",
            labels=["pipeline"],
        )
        for row in rows:
            _histogram(family, [row["pipeline"]], row, DETECTION_BUCKETS)
        return family

    def deliveries(self) -> Metric:
        rows = Delivery.objects.values("channel", "ok").annotate(n=Count("pk")).order_by()
        family = CounterMetricFamily(
            "resumer_notification_deliveries",
            "Notification delivery attempts by channel and outcome (ok or failed).",
            labels=["channel", "outcome"],
        )
        for row in rows:
            family.add_metric([row["channel"], "ok" if row["ok"] else "failed"], row["n"])
        return family


def _counter(name: str, doc: str, labels: list[str], values: dict[tuple, int]) -> Metric:
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family


def _policy(pipeline: str, tool: str) -> str:
    """The tool's declared replay policy (events of calls do not repeat it); "" for a tool
    the registered pipelines no longer declare."""
    try:
        return str(registry.get(pipeline).tool(tool).policy)
    except Exception:  # an unregistered pipeline or tool: a name from the past
        return ""


def build_registry() -> CollectorRegistry:
    """A registry of Resumer's figures only (no process figures: every replica serves the
    same numbers, read from the one database)."""
    figures = CollectorRegistry(auto_describe=False)
    figures.register(ResumerCollector())
    return figures

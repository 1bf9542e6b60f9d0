"""Bar charts drawn on the server as SVG: geometry here, markup in templates/runs/_chart.html.

One row per stage: a line of text (the stage and its figures), then a bar whose length is a
percentage of the chart's width. Percentages keep the text at its real size on a phone and on
a laptop alike (a scaled viewBox would shrink it), and need no script. Colours come from
classes in app.css: the Content-Security-Policy forbids inline style.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from runs import quantities
from runs.reads.pipeline_stats import PipelineStats, StageStats

ROW_HEIGHT = 44
TEXT_Y = 16
BAR_Y = 22
BAR_HEIGHT = 14


@dataclass(frozen=True)
class Segment:
    css: str
    start: str  # percent of the width, formatted for the x attribute
    width: str
    title: str


@dataclass(frozen=True)
class Row:
    label: str
    text: str
    y: int
    segments: list[Segment]

    @property
    def text_y(self) -> int:
        return self.y + TEXT_Y

    @property
    def bar_y(self) -> int:
        return self.y + BAR_Y


@dataclass(frozen=True)
class BarChart:
    slug: str
    title: str
    description: str
    rows: list[Row]
    legend: list[tuple[str, str]] = field(default_factory=list)  # (css class, label)
    bar_height: int = BAR_HEIGHT

    @property
    def height(self) -> int:
        return len(self.rows) * ROW_HEIGHT + 4


def _pct(value: float) -> str:
    return f"{max(0.0, min(100.0, value)):.2f}%"


def bars(
    slug: str,
    title: str,
    description: str,
    rows: Sequence[tuple[str, str, Sequence[tuple[str, float, str]]]],
    legend: list[tuple[str, str]] | None = None,
    *,
    overlay: bool = False,
) -> BarChart:
    """rows: (label, text, [(css, value, title), ...]). Segments are stacked end to end, or
    drawn from zero on top of each other when `overlay` (the longest first)."""
    if overlay:
        scale = max((v for _, _, segs in rows for _, v, _ in segs), default=0)
    else:
        scale = max((sum(v for _, v, _ in segs) for _, _, segs in rows), default=0)
    scale = scale or 1
    out = []
    for index, (label, text, segs) in enumerate(rows):
        start = 0.0
        segments = []
        for css, value, seg_title in segs:
            width = 100 * value / scale
            segments.append(Segment(css, _pct(0 if overlay else start), _pct(width), seg_title))
            start += width
        out.append(Row(label, text, index * ROW_HEIGHT, segments))
    return BarChart(slug, title, description, out, legend or [])


def _ms(ms: int | None) -> str:
    if ms is None:
        return "—"
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


_money = quantities.money


def duration_chart(stats: PipelineStats) -> BarChart:
    def row(s: StageStats):
        text = (
            f"{s.stage}: median {_ms(s.median_ms)} · p95 {_ms(s.p95_ms)}"
            if s.timed
            else f"{s.stage}: no finished attempt"
        )
        segs = [
            ("bar-p95", float(s.p95_ms or 0), f"p95 {_ms(s.p95_ms)}"),
            ("bar-median", float(s.median_ms or 0), f"median {_ms(s.median_ms)}"),
        ]
        return s.stage, text, segs

    return bars(
        "duration",
        "Duration per attempt",
        "From STARTED to the VERIFIED or FAILED that ended it: the dark bar is the median, "
        "the light one the 95th percentile.",
        [row(s) for s in stats.stages],
        [("bar-median", "median"), ("bar-p95", "p95")],
        overlay=True,
    )


def spend_chart(stats: PipelineStats) -> BarChart:
    return bars(
        "spend",
        "Money spent",
        "What the stage's tool calls cost, as each TOOL_RESULT recorded it.",
        [
            (
                s.stage,
                f"{s.stage}: {_money(s.spent)} in {s.paid_calls} call{'s' if s.paid_calls != 1 else ''}",
                [("bar-spent", float(s.spent), _money(s.spent))],
            )
            for s in stats.stages
        ],
    )


def savings_chart(stats: PipelineStats) -> BarChart:
    def row(s: StageStats):
        text = (
            f"{s.stage}: {_money(s.saved_money)} in {s.saved_calls} call"
            f"{'s' if s.saved_calls != 1 else ''} ({s.skipped_calls} skipped, "
            f"{s.reused_calls} reused)"
        )
        segs = [
            ("bar-skipped", float(s.skipped_money), f"checkpoints: {_money(s.skipped_money)}"),
            ("bar-reused", float(s.reused_money), f"reused effects: {_money(s.reused_money)}"),
        ]
        return s.stage, text, segs

    return bars(
        "saved",
        "Paid work saved across resumes",
        "Money not spent again because a checkpoint let a strict resume skip the stage, or "
        "because a confirmed effect was reused instead of called again.",
        [row(s) for s in stats.stages],
        [("bar-skipped", "skipped by a checkpoint"), ("bar-reused", "reused effect")],
    )


CHARTS: tuple[Callable[[PipelineStats], BarChart], ...] = (
    duration_chart,
    spend_chart,
    savings_chart,
)


def charts(stats: PipelineStats) -> list[BarChart]:
    return [build(stats) for build in CHARTS]

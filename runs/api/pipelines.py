"""A pipeline's figures, as its page shows them: per stage over its last N runs, what it spent
(money and model tokens), and what resuming saved (effects made before a resume and reused or
found on the target instead of made again, at their recorded price, and the model tokens of
reused turns), apart from the calls a stage handed back after a gate's answer, which save
nothing (runs/reads/pipeline_stats.py, runs/reads/resume_savings.py)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema

from runs.access import roles
from runs.api.common import require
from runs.api.problems import Problem
from runs.api.schemas import PROBLEMS, Money, Tokens
from runs.pipeline import UnknownPipeline, registry
from runs.reads import pipeline_stats

router = Router(tags=["pipelines"])


class SavedOut(Schema):
    calls: int
    money: Money
    tokens: Tokens


class StageStatsOut(Schema):
    stage: str
    attempts: int
    verified: int
    failed: int
    interrupted: int
    spent: Money
    paid_calls: int
    tokens: Tokens
    # Stages a strict resume skipped, and the paid calls they had made before it.
    skipped: int
    saved_by_skipping: SavedOut
    saved_by_resuming: SavedOut
    replayed_after_gates: int


class PipelineStatsOut(Schema):
    pipeline: str
    window: int
    runs: int
    spent: Money
    tokens: Tokens
    saved_money: Money
    saved_calls: int
    saved_tokens: Tokens
    replayed_after_gates: int
    stages: list[StageStatsOut]


def stage_out(s: pipeline_stats.StageStats) -> dict[str, Any]:
    return {
        "stage": s.stage,
        "attempts": s.attempts,
        "verified": s.verified,
        "failed": s.failed,
        "interrupted": s.interrupted,
        "spent": s.spent,
        "paid_calls": s.paid_calls,
        "tokens": s.tokens,
        "skipped": s.skipped,
        "saved_by_skipping": {
            "calls": s.skipped_calls,
            "money": s.skipped_money,
            "tokens": s.skipped_tokens,
        },
        "saved_by_resuming": {
            "calls": s.reused_calls,
            "money": s.reused_money,
            "tokens": s.reused_tokens,
        },
        "replayed_after_gates": s.replayed_after_gates,
    }


@router.get(
    "/{name}/stats",
    response={200: PipelineStatsOut, **PROBLEMS},
    summary="A pipeline's figures over its last N runs",
)
def stats(request: HttpRequest, name: str, runs: int = pipeline_stats.DEFAULT_WINDOW):
    """What the pipeline page shows: `runs` is one of 10, 25, 50, 100, 250, 500."""
    require(request, roles.can_view)
    if runs not in pipeline_stats.WINDOWS:
        windows = ", ".join(map(str, pipeline_stats.WINDOWS))
        raise Problem(400, f"runs must be one of {windows}")
    try:
        pipeline = registry.get(name)
    except UnknownPipeline:
        raise Problem(404, f"no pipeline named {name!r}") from None
    figures = pipeline_stats.pipeline_stats(pipeline, runs)
    return {
        "pipeline": pipeline.name,
        "window": figures.window,
        "runs": figures.runs,
        "spent": figures.spent,
        "tokens": figures.tokens,
        "saved_money": figures.saved_money,
        "saved_calls": figures.saved_calls,
        "saved_tokens": figures.saved_tokens,
        "replayed_after_gates": figures.replayed_after_gates,
        "stages": [stage_out(s) for s in figures.stages],
    }

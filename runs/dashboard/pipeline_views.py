"""/pipelines/: the pipelines this process runs, each linking its page, and the pipelines
runs were started with that it does not load (their runs are flagged in the inbox too)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from runs.access.guards import viewer_required
from runs.models import Run
from runs.pipeline import registry


@dataclass(frozen=True)
class PipelineRow:
    name: str
    description: str
    stages: list[str]
    runs: int
    needs_human: int


@require_GET
@viewer_required
def pipeline_index(request: HttpRequest) -> HttpResponse:
    """Registered pipelines in RESUMER_PIPELINES order, with their runs: one query."""
    counts = {
        row["pipeline"]: row
        for row in Run.objects.order_by()
        .values("pipeline")
        .annotate(runs=Count("pk"), needs_human=Count("pk", filter=Q(attention=0)))
    }
    known = []
    for name in registry.names():
        pipeline = registry.get(name)
        row = counts.pop(name, {})
        known.append(
            PipelineRow(
                name,
                getattr(pipeline, "description", "") or "",
                list(pipeline.stage_names),
                row.get("runs", 0),
                row.get("needs_human", 0),
            )
        )
    unknown = [
        PipelineRow(name, "", [], row["runs"], row["needs_human"])
        for name, row in sorted(counts.items())
    ]
    return render(request, "runs/pipelines.html", {"known": known, "unknown": unknown})

"""/workers/: the live RQ workers and the leases each holds, for operators and up (a worker's
current job names runs and their tickets; viewers read runs, not the fleet)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from runs.access.guards import operator_required
from runs.reads.workers import workers_page


@require_GET
@operator_required
def worker_list(request: HttpRequest) -> HttpResponse:
    """Reads Redis (RQ's worker registry) and the database (the leases); asks nothing else."""
    return render(request, "runs/workers.html", {"page": workers_page()})

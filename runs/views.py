from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from runs.models import Run


@require_GET
@login_required
def inbox(request: HttpRequest) -> HttpResponse:
    runs = Run.objects.order_by("attention", "-updated_at", "-id")[:50]
    return render(request, "runs/inbox.html", {"runs": runs})

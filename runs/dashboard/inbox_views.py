"""The inbox's live notice: what came to need a human since the rows on the page were read.

The inbox polls this every POLL_SECONDS and never swaps its rows by itself: a row moving
under the pointer is a click on the wrong run. While nothing came the answer is an empty 204,
which leaves the page as it is. The notice says how many runs are new ("3 new
runs need a human") and shows them when the operator clicks it, which reloads the results
as a filter change does. A page left idle keeps its rows: idle is also an operator reading a
row, and a browser cannot tell the two apart."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from runs.access.guards import viewer_required
from runs.dashboard.forms import InboxNewsForm
from runs.dashboard.views import INBOX_POLL_SECONDS as POLL_SECONDS
from runs.reads.inbox import new_since


@require_GET
@viewer_required
def inbox_news(request: HttpRequest) -> HttpResponse:
    form = InboxNewsForm(request.GET)
    if not form.is_valid():
        # A garbled poll starts again from now rather than asking every 15 s in vain.
        context = {"new": 0, "mark": timezone.now(), "poll_seconds": POLL_SECONDS}
        return render(request, "runs/_inbox_news.html", context)
    since = form.cleaned_data["since"]
    new = new_since(form.filters(), since)
    if not new:
        return HttpResponse(status=204)
    context = {"new": new, "mark": since, "poll_seconds": POLL_SECONDS}
    return render(request, "runs/_inbox_news.html", context)

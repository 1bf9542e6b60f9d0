"""The operator dashboard. Each view: check who asks, parse, call one domain function, render.

Reading needs any role (viewer, operator, supervisor); approving, and reading what a failed
stage logged (logs may hold sensitive data), needs operator or supervisor. Both are enforced on
the server by the guards each view wears (runs/access/guards.py), whatever the page showed.
Actions are POST-only forms with Django's CSRF token; htmx only polls the timeline of an
active run.
"""

from __future__ import annotations

from typing import TypeVar

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST

from runs import ids
from runs.access import roles
from runs.access.guards import operator_required, viewer_required
from runs.dashboard import charts
from runs.dashboard.forms import (
    ApproveForm,
    GroupApproveForm,
    PipelineWindowForm,
    TimelinePollForm,
)
from runs.ledger import artifacts as artifact_store
from runs.models import GroupApproval, Run, StoredPlan
from runs.planning import grouping, stored_plans, triage
from runs.planning.planner import Plan
from runs.planning.resume import AlreadyApproved, ResumeRefused, approve
from runs.reads import batches, groups, live
from runs.reads import pipeline_stats as stats
from runs.reads.artifacts import artifact_view, get_artifact
from runs.reads.decision import decision
from runs.reads.filters import InboxFilterForm
from runs.reads.gates import waiting
from runs.reads.inbox import inbox_groups, inbox_page
from runs.reads.run_page import get_run, run_page, timeline_update

# How often the inbox asks whether runs came to need a human (runs/dashboard/inbox_views.py):
# a crash shows within a few seconds. A poll that finds nothing new is an empty 204 after
# three queries (one count on run_inbox_idx), about 2 ms of a web worker: a hundred open
# inboxes cost a few per cent of one (bench/live_polls.py). Server-sent events would hold one of gunicorn's sync
# workers (three per machine, docs/deploy.md) for every open inbox.
INBOX_POLL_SECONDS = 3
T = TypeVar("T")


def _after(request: HttpRequest) -> int | None:
    """The `?after=<seq>` of a timeline page; anything that is not a small number means the
    latest page (a garbled parameter is not worth an error page)."""
    value = request.GET.get("after", "")
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 12 else None


def _found(value: T | None, missing: str) -> T:
    """The page's object, or 404: the queries say "nothing" with None."""
    if value is None:
        raise Http404(missing)
    return value


def _run(pk: int) -> Run:
    return _found(get_run(pk), f"There is no run-{pk}.")


# --- Inbox -----------------------------------------------------------------------------------


@require_GET
@viewer_required
def inbox(request: HttpRequest) -> HttpResponse:
    form = InboxFilterForm(request.GET)
    page = triaged = gates = None
    # Taken before the rows are read: the "N new" notice counts what changed after it
    # (inbox_views.inbox_news), so a run that moves during the read is never missed.
    mark = timezone.now()
    if form.is_valid():
        page = inbox_page(form.filters(), form.cleaned_data["after"])
        triaged = inbox_groups(form.filters())
        # Runs that asked a human before they acted: first, oldest gate first.
        gates = waiting(form.filters())
    context = {
        "form": form,
        "page": page,
        "triage": triaged,
        "waiting": gates,
        "mark": mark,
        "poll_seconds": INBOX_POLL_SECONDS,
    }
    # htmx swaps just the results (and the groups, out of band) when a filter changes; a
    # history restore wants the page.
    partial = request.htmx and not request.htmx.history_restore_request
    template = "runs/_inbox_partial.html" if partial else "runs/inbox.html"
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


# --- One run ---------------------------------------------------------------------------------


@require_GET
@viewer_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    page = run_page(_run(pk), _after(request), logs=roles.can_approve(request.user))
    return render(request, "runs/run_detail.html", {"page": page, "run": page.run})


@require_GET
@viewer_required
def run_timeline(request: HttpRequest, pk: int) -> HttpResponse:
    """The polled partial. A live page's poll form says what the page shows: it gets nothing
    (204) when nothing moved, else only the events after its last one, with the header and,
    when the run moved, its decision, plan, verdict and (once it stopped) its facts, all out
    of band (runs/reads/live.py). Without that form, or when the page must be laid out again,
    the whole timeline comes, in place of the page's."""
    logs = roles.can_approve(request.user)
    form = TimelinePollForm(request.GET)
    if form.is_valid():
        found = live.poll(
            _found(live.poll_run(pk), f"There is no run-{pk}."), form.seen_value(), logs=logs
        )
        if found.quiet:
            return HttpResponse(status=204)
        update = found.update
    else:
        update = timeline_update(
            _run(pk), _after(request), request.GET.get("seen", "")[:40], logs=logs
        )
    page = update.page
    context = {
        "page": page,
        "run": page.run,
        "timeline": page.timeline,
        "progress": page.progress,
        "facts": page.facts,
        "changed": update.changed,
        "oob": True,
    }
    if isinstance(page.timeline, live.NewsPage):
        return render(request, "runs/_timeline_news.html", context)
    response = render(request, "runs/_timeline.html", context)
    if request.htmx:
        # Asked by the page's poll form, the answer takes the whole timeline's place.
        response["HX-Retarget"] = "#timeline"
        response["HX-Reswap"] = "outerHTML"
    return response


@require_GET
@viewer_required
def plan(request: HttpRequest, pk: int) -> HttpResponse:
    """The stored plan: a GET never asks a target anything (see runs/planning/stored_plans.py)."""
    run = _run(pk)
    shown = stored_plans.shown(run)
    if shown is None:
        return _render_plan(request, run, None)
    return _render_plan(request, run, shown[0], stored=shown[1])


@require_POST
@operator_required
def check_targets(request: HttpRequest, pk: int) -> HttpResponse:
    """ "Check targets again": compute the plan now, asking each target, and store it."""
    run = _run(pk)
    stored_plans.refresh(run)
    messages.info(request, "The plan was computed again with the targets' answers of now.")
    return redirect("runs:plan", pk=run.pk)


def _render_plan(
    request: HttpRequest,
    run,
    plan: Plan | None,
    *,
    stored: StoredPlan | None = None,
    refusal: str = "",
    form: ApproveForm | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "run": run,
        "plan": plan,
        "stored_plan": stored,
        "refusal": refusal,
        "form": form,
        # What the plan panel says beside its buttons: blockers' effects, upgrade's acts.
        "page": {"decision": decision(run, plan, stored)},
    }
    return render(request, "runs/plan.html", context, status=status)


@require_POST
@operator_required
def approve_plan(request: HttpRequest, pk: int) -> HttpResponse:
    run = _run(pk)
    form = ApproveForm(request.POST)
    if not form.is_valid():
        shown = stored_plans.shown(run)
        plan, stored = shown if shown is not None else (None, None)
        return _render_plan(request, run, plan, stored=stored, form=form, status=400)
    action, fingerprint = form.cleaned_data["action"], form.cleaned_data["fingerprint"]
    actor = ids.user_actor(request.user)
    try:
        approval = approve(run, action, fingerprint, actor=actor)
    except AlreadyApproved as exc:
        # The same decision again (a double click): it lands where the first one did.
        messages.info(request, str(exc))
        return redirect("runs:run", pk=run.pk)
    except ResumeRefused as exc:  # StalePlan included: it comes with the fresh plan, stored
        return _render_plan(request, run, exc.plan, stored=exc.stored, refusal=str(exc), status=409)
    if approval.branch is not None:
        messages.success(
            request,
            f"{run.public_id} is superseded by the new branch {approval.branch.public_id}, "
            f"which starts at {approval.branch.current_stage} with the upgraded inputs.",
        )
    else:
        # Said while the run is resuming: the run page drops it (app.js) once the run it
        # follows is no longer active, so it never stays above "Succeeded".
        messages.success(
            request,
            f"{run.public_id} is resuming with its pinned inputs.",
            extra_tags="while-active",
        )
    return redirect("runs:run", pk=approval.resumed.pk)


# --- Groups of runs (bulk triage) ------------------------------------------------------------


def _render_group(
    request: HttpRequest,
    fingerprint: str,
    *,
    form: GroupApproveForm | None = None,
    refusal: str = "",
    status: int = 200,
) -> HttpResponse:
    found = grouping.group(fingerprint)
    if found is None and status == 200:
        raise Http404("No run that needs a human has a plan of this shape now.")
    group, members = found if found is not None else (None, [])
    context = {
        "fingerprint": fingerprint,
        "group": group,
        "calls": groups.calls(group.shape) if group is not None else [],
        "members": members,
        "form": form,
        "refusal": refusal,
        "inline_limit": settings.RESUMER_GROUP_INLINE,
    }
    return render(request, "runs/group.html", context, status=status)


@require_GET
@viewer_required
def group_detail(request: HttpRequest, fingerprint: str) -> HttpResponse:
    """One group of runs with the same plan shape, read from their stored plans."""
    return _render_group(request, fingerprint)


@require_POST
@operator_required
def approve_group(request: HttpRequest, fingerprint: str) -> HttpResponse:
    form = GroupApproveForm(request.POST)
    if not form.is_valid():
        return _render_group(request, fingerprint, form=form, status=400)
    if form.cleaned_data["fingerprint"] != fingerprint:
        form.add_error("fingerprint", "The form names another group than this page's.")
        return _render_group(request, fingerprint, form=form, status=400)
    actor = ids.user_actor(request.user)
    try:
        outcome = triage.approve_or_queue(
            fingerprint, form.run_ids(), mode=form.cleaned_data["action"], actor=actor
        )
    except triage.GroupRefused as exc:
        return _render_group(request, fingerprint, form=form, refusal=str(exc), status=exc.status)
    if outcome.queued is not None:
        # A worker approves it; the batch page follows the row.
        return redirect("runs:batch", batch_id=outcome.queued.pk)
    batch = outcome.batch
    # Nothing approved (every run moved, or was approved by someone else): a conflict, with
    # each run's fresh plan listed, like a single refused approval.
    approved, skipped = batch.outcome()
    return render(
        request,
        "runs/group_result.html",
        {"batch": batch, "approved": batches.approved_now(approved), "skipped": skipped},
        status=200 if batch.approved else 409,
    )


@require_GET
@viewer_required
def batch_detail(request: HttpRequest, batch_id: str) -> HttpResponse:
    """A group approval: approved in the request, or by a worker (then its progress while it
    runs); what was approved and what became of each run, and what was skipped with each
    skipped run's fresh plan. It polls itself while the batch or a run of it is moving."""
    row = get_object_or_404(GroupApproval, pk=batch_id)
    approved = batches.approved_now(row.approved)
    context = {
        "row": row,
        "approved": approved,
        "moving": not row.finished or any(a.active for a in approved),
    }
    template = "runs/_batch.html" if request.htmx else "runs/batch.html"
    return render(request, template, context)


# --- Pipelines -------------------------------------------------------------------------------


@require_GET
@viewer_required
def pipeline_detail(request: HttpRequest, name: str) -> HttpResponse:
    """Where checkpoints pay: each stage's figures over the pipeline's last N runs."""
    pipeline = _found(stats.get_pipeline(name), f"There is no pipeline {name!r}.")
    form = PipelineWindowForm(request.GET)
    context = {
        "pipeline": pipeline,
        "form": form,
        "costly_from": stats.COSTLY_FROM,
        "long_from_ms": stats.LONG_FROM_MS,
    }
    if not form.is_valid():
        return render(request, "runs/pipeline.html", context, status=400)
    figures = stats.pipeline_stats(pipeline, form.cleaned_data["runs"])
    context.update(stats=figures, charts=charts.charts(figures))
    return render(request, "runs/pipeline.html", context)


# --- Artifacts -------------------------------------------------------------------------------


@require_GET
@viewer_required
def artifact_detail(request: HttpRequest, pk: int) -> HttpResponse:
    view = artifact_view(_found(get_artifact(pk), f"There is no artifact {pk}."))
    return render(request, "runs/artifact.html", {"view": view, "artifact": view.artifact})


# Image types a browser renders as an image and nothing else. SVG can carry script, so it is
# also sandboxed (below); anything not listed is offered as a download, never rendered.
INLINE_IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml"}


@require_GET
@viewer_required
def artifact_raw(request: HttpRequest, pk: int) -> HttpResponse:
    artifact = _found(get_artifact(pk), f"There is no artifact {pk}.")
    try:
        # Only bytes that still hash to what was recorded are served: a tampered blob is
        # never handed out as if it were the artifact (its page says it was altered).
        data = artifact_store.read_verified(artifact.uri, artifact.sha256)
    except artifact_store.ArtifactMissing as exc:
        raise Http404(str(exc)) from exc
    if artifact.content_type in INLINE_IMAGE_TYPES:
        response = HttpResponse(data, content_type=artifact.content_type)
        response["Content-Disposition"] = "inline"
    elif artifact.is_text:
        # Text is shown as text, whatever it contains: an agent's draft is untrusted.
        response = HttpResponse(data, content_type="text/plain; charset=utf-8")
        response["Content-Disposition"] = "inline"
    else:
        response = HttpResponse(data, content_type="application/octet-stream")
        response["Content-Disposition"] = f'attachment; filename="artifact-{artifact.pk}"'
    # Opened on its own (not as an <img>), an SVG would be a document that may run script:
    # a sandbox with no script, no plugins and no requests of its own prevents that.
    response["Content-Security-Policy"] = (
        "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"
    )
    response["X-Content-Type-Options"] = "nosniff"
    response["Cross-Origin-Resource-Policy"] = "same-origin"
    return response

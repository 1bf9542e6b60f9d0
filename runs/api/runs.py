"""Runs: the inbox's list (its filters, its keyset paging), one run, its timeline by seq, its
effects, starting one; its stored plan (with what each option does outside, in the words of
every face), asking the targets again, and the approval of a plan by fingerprint. Each endpoint
calls what the dashboard's page calls."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from ninja import Query, Router

from runs import ids
from runs.access import roles
from runs.api import idempotency
from runs.api.common import find_run, require, run_out
from runs.api.problems import Problem
from runs.api.schemas import (
    PROBLEMS,
    ApprovalOut,
    ApproveIn,
    EffectOut,
    EventPage,
    PlanOut,
    RunDetailOut,
    RunPage,
    StartIn,
    StoredPlanOut,
)
from runs.events import PlanApproved, read, shown, where
from runs.execution.engine import start_run
from runs.ledger import leases
from runs.models import ApprovalMode, Effect, Event, Run, StoredPlan
from runs.pipeline import InvalidInput, UnknownPipeline
from runs.planning import stored_plans
from runs.planning.acts import plan_acts
from runs.planning.plan import Plan
from runs.planning.resume import AlreadyApproved, ResumeRefused, StalePlan, approve
from runs.reads import run_page
from runs.reads.filters import InboxFilterForm
from runs.reads.inbox import inbox_page

router = Router(tags=["runs"])
MAX_PAGE = 100
MAX_EVENTS = 500


def inbox_form(request: HttpRequest) -> InboxFilterForm:
    """The inbox's filter form, given the query string; `after` may be a public run id. A bad
    filter is a 422 problem with the form's errors."""
    data = request.GET.copy()
    if data.get("after"):
        pk = ids.parse_run_id(data["after"], bare=True)
        if pk is None:
            raise Problem(400, "after is a run id (e.g. run-123), the last of the previous page")
        data["after"] = str(pk)
    if data.get("notice") and ids.parse_pk(data["notice"]) is None:
        raise Problem(400, "notice is a notification's id (digits)")
    form = InboxFilterForm(data)
    if not form.is_valid():
        raise Problem(
            422,
            "the filters are not valid",
            kind="invalid-filter",
            errors=form.errors.get_json_data(),
        )
    return form


@router.get("", response={200: RunPage, **PROBLEMS}, summary="Runs, as the inbox lists them")
def list_runs(
    request: HttpRequest, limit: Query[int] = 50, after: Query[str | None] = None
) -> dict[str, Any]:
    """Needs-a-human first, then the most recently changed; the inbox's filters (`status`,
    `pipeline`, `stage`, `reason`, `q`, `notice`) as query parameters. Keyset paging: pass
    the page's `next_after` as `after`."""
    require(request, roles.can_view)
    if not 1 <= limit <= MAX_PAGE:
        raise Problem(400, f"limit is from 1 to {MAX_PAGE}")
    form = inbox_form(request)
    page = inbox_page(form.filters(), form.cleaned_data["after"], size=limit)
    return {
        "items": [run_out(run) for run in page.runs],
        "next_after": ids.run_id(page.next_after) if page.next_after else None,
        "needs_human": page.needs_human,
    }


def detail(run: Run) -> dict[str, Any]:
    verdict = run_page.verdict(run)
    branches = run.branches.order_by("id").values_list("id", flat=True)
    return {
        **run_out(run),
        "inputs": run.inputs,
        "branches": [ids.run_id(pk) for pk in branches],
        "progress": [vars(step) for step in run_page.progress(run).steps],
        "verdict": None
        if verdict is None
        else {
            "kept": verdict.kept,
            "seq": verdict.seq,
            "fingerprint": verdict.fingerprint,
            "mode": verdict.mode,
            "summary": verdict.summary,
        },
    }


@router.get("/{run_id}", response={200: RunDetailOut, **PROBLEMS}, summary="One run")
def read_run(request: HttpRequest, run_id: str) -> dict[str, Any]:
    require(request, roles.can_view)
    return detail(find_run(run_id))


@router.post(
    "",
    response={201: RunDetailOut, **PROBLEMS},
    summary="Start a run with inputs (Idempotency-Key honoured)",
)
def create_run(request: HttpRequest, body: StartIn) -> JsonResponse:
    """Pins the inputs and queues the first stage, as `manage.py start_run` does."""
    require(request, roles.can_approve)
    who = ids.user_actor(request.user)

    def act() -> tuple[int, Any]:
        try:
            run = start_run(body.pipeline, body.inputs, actor=who)
        except UnknownPipeline:
            raise Problem(
                422, f"there is no pipeline {body.pipeline!r}", kind="invalid-input"
            ) from None
        except InvalidInput as exc:
            raise Problem(422, str(exc), kind="invalid-input", input=exc.input) from None
        found = find_run(run.public_id)
        return 201, RunDetailOut.model_validate(detail(found)).model_dump(mode="json")

    return idempotency.run(request, body.model_dump(mode="json"), act)


@router.get("/{run_id}/events", response={200: EventPage, **PROBLEMS}, summary="The run's timeline")
def events(
    request: HttpRequest, run_id: str, after: Query[str] = "0", limit: Query[int] = 100
) -> dict[str, Any]:
    """Events by seq, oldest first, from `after` (exclusive; 0 = the start). Pass
    `next_after` as `after` for the next page; it is null once these are the latest."""
    require(request, roles.can_view)
    # A seq, not a pk: 0 is the start of the log.
    seq = 0 if after == "0" else ids.parse_pk(after)
    if seq is None:
        raise Problem(400, "after is a seq: digits, 0 for the start")
    if not 1 <= limit <= MAX_EVENTS:
        raise Problem(400, f"limit is from 1 to {MAX_EVENTS}")
    page = run_page.timeline(find_run(run_id), seq, size=limit)
    return {
        "items": [
            {
                "seq": e.seq,
                "type": e.type,
                "stage": e.stage,
                "actor": e.actor,
                "created_at": e.created_at,
                "payload": shown(e),
                "payload_ref": e.payload_ref,
            }
            for e in page.events
        ],
        "next_after": page.newer_after,
    }


@router.get(
    "/{run_id}/effects",
    response={200: list[EffectOut], **PROBLEMS},
    summary="What the run did outside: its effect ledger",
)
def effects(request: HttpRequest, run_id: str) -> list[dict[str, Any]]:
    require(request, roles.can_view)
    run = find_run(run_id)
    return [
        {**{f: getattr(e, f) for f in EFFECT_FIELDS}, "cost": e.cost}
        for e in Effect.objects.filter(run=run).order_by("id")
    ]


EFFECT_FIELDS = [name for name in EffectOut.model_fields if name != "cost"]


def stored_out(run: Run, stored: StoredPlan) -> dict[str, Any]:
    return {
        "run": run.public_id,
        "fingerprint": stored.fingerprint,
        "run_version": stored.run_version,
        "computed_at": stored.computed_at,
        "current": stored.run_version == run.version,
        "plan": stored.data,
        "acts": plan_acts(Plan.from_dict(stored.data)).to_dict(),
    }


@router.get(
    "/{run_id}/plan",
    response={200: StoredPlanOut, **PROBLEMS},
    summary="The stored plan (a GET never asks a target anything)",
)
def read_plan(request: HttpRequest, run_id: str) -> dict[str, Any]:
    require(request, roles.can_view)
    run = find_run(run_id)
    shown = stored_plans.shown(run)
    if shown is None:
        raise Problem(404, f"{run.public_id} has no stored plan", kind="no-plan")
    return stored_out(run, shown[1])


@router.post(
    "/{run_id}/plan/check",
    response={200: StoredPlanOut, **PROBLEMS},
    summary="Check targets again: compute the plan now, asking each target, and store it",
)
def check_targets(request: HttpRequest, run_id: str) -> dict[str, Any]:
    require(request, roles.can_approve)
    run = find_run(run_id)
    stored_plans.refresh(run)
    run.refresh_from_db()
    return stored_out(run, StoredPlan.objects.get(run=run))


def approval_out(run: Run, mode: str, fingerprint: str) -> dict[str, Any]:
    """What an approval of this plan came to, read from its PLAN_APPROVED: the same answer
    for the approval and for the same approval sent again."""
    event = (
        Event.objects.filter(
            where(PlanApproved, fingerprint=fingerprint, action=mode), run_id=run.pk
        )
        .order_by("-seq")
        .only("type", "payload", "actor", "created_at")
        .first()
    )
    branch = None
    if mode == ApprovalMode.UPGRADE:
        branch = run.branches.order_by("-id").values_list("id", flat=True).first()
    return ApprovalOut.model_validate(
        {
            "run": run.public_id,
            "mode": mode,
            "fingerprint": fingerprint,
            "resumed": ids.run_id(branch or run.pk),
            "branch": ids.run_id(branch) if branch else None,
            "next_stage": read(event).next_stage if event else "",
            "approved_by": event.actor if event else "",
            "approved_at": event.created_at if event else None,
        }
    ).model_dump(mode="json")


@router.post(
    "/{run_id}/approve",
    response={200: ApprovalOut, **PROBLEMS},
    summary="Approve the plan with this fingerprint: strict resume or upgrade (Idempotency-Key)",
)
def approve_plan(request: HttpRequest, run_id: str, body: ApproveIn) -> JsonResponse:
    """The plan is computed again; a fingerprint that is not the fresh plan's is a 409 whose
    problem carries the fresh plan (`plan`, `fingerprint`). The same approval sent again
    answers as the first did."""
    require(request, roles.can_approve)
    run, who = find_run(run_id), ids.user_actor(request.user)

    def act() -> tuple[int, Any]:
        try:
            approve(run, body.mode, body.fingerprint, actor=who)
        except AlreadyApproved:
            pass
        except ResumeRefused as exc:
            plan = exc.plan
            raise Problem(
                409,
                str(exc),
                kind="stale-plan" if isinstance(exc, StalePlan) else "refused",
                fingerprint=plan.fingerprint if plan else None,
                plan=PlanOut.model_validate(plan.to_dict()).model_dump() if plan else None,
            ) from None
        except leases.LeaseBusy:
            raise Problem(409, "another process holds the run's lease; try again") from None
        return 200, approval_out(run, body.mode, body.fingerprint)

    return idempotency.run(request, body.model_dump(mode="json"), act)

"""Groups of runs that need a human, by the shape of their stored plans, and the approval of
a group: each run approved through resume.approve on its own plan (runs/planning/triage.py),
in the request up to RESUMER_GROUP_INLINE runs, by a worker beyond (202 and a batch to
follow), as the dashboard does."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from ninja import Router

from runs import ids
from runs.access import roles
from runs.api import idempotency
from runs.api.common import require
from runs.api.problems import Problem
from runs.api.runs import inbox_form
from runs.api.schemas import (
    PROBLEMS,
    BatchOut,
    GroupApproveIn,
    GroupDetailOut,
    GroupList,
)
from runs.models import ApprovalMode, GroupApproval
from runs.planning import triage
from runs.planning.grouping import FINGERPRINT_RE, Group
from runs.reads.inbox import inbox_groups

router = Router(tags=["groups"])


def group_out(group: Group) -> dict[str, Any]:
    return {
        "fingerprint": group.fingerprint,
        "count": group.count,
        "status": group.status,
        "next_stage": group.next_stage,
        "blocked": group.blocked,
        "approvable": group.approvable,
        "upgrade_available": group.upgrade_available,
        "headline": group.headline,
        "summary": group.summary,
        "resume_money": group.resume_money,
        "acts": group.acts.to_dict() if group.acts is not None else None,
    }


def fingerprint_of(text: str) -> str:
    if not FINGERPRINT_RE.match(text):
        raise Problem(400, "a group fingerprint is 64 lowercase hexadecimal characters")
    return text


@router.get(
    "/groups", response={200: GroupList, **PROBLEMS}, summary="Groups of runs by plan shape"
)
def list_groups(request: HttpRequest) -> dict[str, Any]:
    """The runs that need a human, grouped as the inbox groups them (its filters apply)."""
    require(request, roles.can_view)
    found = inbox_groups(inbox_form(request).filters())
    return {"groups": [group_out(g) for g in found.groups], "unplanned": found.unplanned}


@router.get(
    "/groups/{fingerprint}", response={200: GroupDetailOut, **PROBLEMS}, summary="One group"
)
def read_group(request: HttpRequest, fingerprint: str) -> dict[str, Any]:
    require(request, roles.can_view)
    found = triage.group(fingerprint_of(fingerprint))
    if found is None:
        raise Problem(404, "no run that needs a human has a plan of this shape now")
    group, members = found
    return {
        **group_out(group),
        "runs": [
            {
                "run": m.public_id,
                "fingerprint": m.fingerprint,
                "status": m.status,
                "current_stage": m.current_stage,
                "resume_money": m.resume_money,
            }
            for m in members
        ],
    }


def batch_out(
    batch_id: str, group: str, state: str, approved: list, skipped: list, error: str = ""
) -> dict[str, Any]:
    """A batch's outcome (triage.Batch.outcome(), a GroupApproval row), runs by public id."""
    return BatchOut.model_validate(
        {
            "batch": batch_id,
            "group": group,
            "state": state,
            "approved": [
                {**a, "run": ids.run_id(a["run"]), "resumed": ids.run_id(a["resumed"])}
                for a in approved
            ],
            "skipped": [{**s, "run": ids.run_id(s["run"])} for s in skipped],
            "error": error,
        }
    ).model_dump(mode="json")


@router.post(
    "/groups/{fingerprint}/approve",
    response={200: BatchOut, 202: BatchOut, **PROBLEMS},
    summary="Approve a group, each run on its own plan (Idempotency-Key honoured)",
)
def approve_group(request: HttpRequest, fingerprint: str, body: GroupApproveIn) -> JsonResponse:
    """200 with what was approved and skipped (409 when nothing was); a group larger than
    RESUMER_GROUP_INLINE is approved by a worker: 202, follow /api/v1/batches/{batch}."""
    require(request, roles.can_approve)
    fingerprint, who = fingerprint_of(fingerprint), ids.user_actor(request.user)

    def act() -> tuple[int, Any]:
        try:
            run_ids = triage.parse_run_ids(body.runs)
            outcome = triage.approve_or_queue(
                fingerprint, run_ids, mode=ApprovalMode(body.mode), actor=who
            )
        except triage.GroupRefused as exc:
            raise Problem(exc.status, str(exc), kind="group-refused") from None
        if outcome.queued is not None:
            row = outcome.queued
            return 202, batch_out(row.pk, row.group, row.state, [], [])
        batch = outcome.batch
        approved, skipped = batch.outcome()
        status = 200 if batch.approved else 409
        return status, batch_out(batch.id, batch.group, "done", approved, skipped)

    return idempotency.run(request, body.model_dump(mode="json"), act)


@router.get(
    "/batches/{batch_id}",
    response={200: BatchOut, **PROBLEMS},
    summary="A group approval a worker carries out: its progress, then its outcome",
)
def read_batch(request: HttpRequest, batch_id: str) -> dict[str, Any]:
    require(request, roles.can_view)
    row = GroupApproval.objects.filter(pk=batch_id[:32]).first() if batch_id.isalnum() else None
    if row is None:
        raise Problem(404, "there is no such batch")
    return batch_out(row.pk, row.group, row.state, row.approved, row.skipped, row.error)

"""Deviations: a finished run that departed from its approved plan is acknowledged with a
reason (runs/planning/acknowledge.py, the dashboard's button), and leaves the runs that need
a human. An operator's act, recorded as an event under their name."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from ninja import Router, Schema

from runs import ids
from runs.access import roles
from runs.api import idempotency
from runs.api.common import find_run, require
from runs.api.problems import Problem
from runs.api.schemas import PROBLEMS, ReasonIn
from runs.events import read
from runs.planning.acknowledge import AcknowledgeRefused, acknowledge

router = Router(tags=["deviations"])


class AcknowledgedOut(Schema):
    run: str
    seq: int
    by: str
    reason: str


@router.post(
    "/{run_id}/acknowledge",
    response={200: AcknowledgedOut, **PROBLEMS},
    summary="Acknowledge how a finished run departed from its plan (Idempotency-Key)",
)
def acknowledge_deviation(request: HttpRequest, run_id: str, body: ReasonIn) -> JsonResponse:
    """The run must have finished after a PLAN_DEVIATED; the acknowledgement is an event in
    its chain, and the run leaves the inbox. A run without a deviation is a 409."""
    require(request, roles.can_approve)
    run, who = find_run(run_id), ids.user_actor(request.user)

    def act() -> tuple[int, Any]:
        try:
            event = acknowledge(run.pk, body.reason, actor=who)
        except AcknowledgeRefused as exc:
            raise Problem(409, str(exc), kind="not-acknowledged") from None
        return 200, {
            "run": run.public_id,
            "seq": event.seq,
            "by": who,
            "reason": read(event).reason,
        }

    return idempotency.run(request, body.model_dump(mode="json"), act)

"""The ways out of a failed answer, for machines: a confirmation asked again after its target
refused the call (runs/gates/reopen.py), and a stopped run closed out with a reason
(runs/planning/close_out.py). Each calls what the run page's buttons call; both are an
operator's act, recorded as an event under their name."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from ninja import Router, Schema
from pydantic import Field

from runs import ids
from runs.access import roles
from runs.api import idempotency
from runs.api.common import find_run, require
from runs.api.gates import gate_out
from runs.api.problems import Problem
from runs.api.schemas import PROBLEMS, GateOut, ReasonIn
from runs.events import read
from runs.gates.reopen import AskAgainRefused, ask_again
from runs.models import Gate
from runs.planning.close_out import CloseRefused, InvalidReason, close_out

router = Router(tags=["ways out"])


class ClosedOut(Schema):
    run: str
    status: str
    seq: int
    by: str
    reason: str
    # The effects whose outcome the ledger still does not know: closing settles nothing.
    unsettled: list[dict[str, Any]]
    # The gates the run waited at, closed with it ("stage/gate").
    gates_closed: list[str]


@router.post(
    "/{run_id}/close",
    response={200: ClosedOut, **PROBLEMS},
    summary="Close a stopped run out, with a reason (Idempotency-Key honoured)",
)
def close_run(request: HttpRequest, run_id: str, body: ReasonIn) -> JsonResponse:
    """The run must be stopped (interrupted, failed, needing approval, waiting at a gate): a
    run that is running, finished, superseded or closed already is a 409; a missing or blank
    reason a 422. The run is never resumed and leaves the inbox; its open gates close."""
    require(request, roles.can_approve)
    run, who = find_run(run_id), ids.user_actor(request.user)

    def act() -> tuple[int, Any]:
        try:
            event = close_out(run.pk, body.reason, actor=who)
        except InvalidReason as exc:
            raise Problem(422, str(exc), kind="invalid-reason") from None
        except CloseRefused as exc:
            raise Problem(409, str(exc), kind="not-closed") from None
        closed = read(event)
        return 200, {
            "run": run.public_id,
            "status": "closed",
            "seq": event.seq,
            "by": who,
            "reason": closed.reason,
            "unsettled": closed.unsettled,
            "gates_closed": closed.gates_closed,
        }

    return idempotency.run(request, body.model_dump(mode="json"), act)


class AskAgainIn(Schema):
    # The refused confirmation's gate; may be left out when the run has only one.
    gate: int | None = Field(default=None, ge=1)


@router.post(
    "/{run_id}/ask-again",
    response={200: GateOut, **PROBLEMS},
    summary="Ask a confirmation again after its target refused the call (Idempotency-Key)",
)
def ask_again_gate(request: HttpRequest, run_id: str, body: AskAgainIn) -> JsonResponse:
    """The run must have failed on a call a human confirmed and its target refused; the gate
    reopens (the run waits) and is answered like any other, its call then made under a new
    key. A run with nothing to ask again is a 409."""
    require(request, roles.can_approve)
    run, who = find_run(run_id), ids.user_actor(request.user)

    def act() -> tuple[int, Any]:
        try:
            gate = ask_again(run.pk, actor=who, gate_pk=body.gate)
        except AskAgainRefused as exc:
            raise Problem(409, str(exc), kind="not-asked") from None
        reopened = Gate.objects.get(pk=gate.pk)
        return 200, GateOut.model_validate(gate_out(reopened)).model_dump(mode="json")

    return idempotency.run(request, body.model_dump(mode="json"), act)

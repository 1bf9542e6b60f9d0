"""The ways out of a stopped run, for machines: a confirmation asked again after its target
refused the call (runs/gates/reopen.py), a stopped run closed out with a reason
(runs/planning/close_out.py), and a supervisor asked to settle an effect the plan is blocked on
(runs/asks.py). Each calls what the run and effect pages' buttons call, as an operator's act:
the first two recorded as events under their name, the ask as who asked (no event: the ask
changes nothing of the run)."""

from __future__ import annotations

from datetime import datetime
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
from runs.api.schemas import PROBLEMS, Body, GateOut, ReasonIn
from runs.asks import AskRefused, ask_supervisor
from runs.events import read
from runs.gates.reopen import AskAgainRefused, ask_again
from runs.models import Effect, Gate
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


class AskAgainIn(Body):
    # The refused confirmation's gate; may be left out when the run has only one.
    gate: int | None = Field(default=None, ge=1)


@router.post(
    "/{run_id}/ask-again",
    response={200: GateOut, **PROBLEMS},
    summary="Ask a gate again: a refused confirmed call, or a question that sent its stage back "
    "(Idempotency-Key)",
)
def ask_again_gate(request: HttpRequest, run_id: str, body: AskAgainIn) -> JsonResponse:
    """The run must have failed on a call a human confirmed and its target refused (the
    confirmation's next answer's call is made under a new key), or on a question's answer
    that sent its stage back ("request changes"); the gate reopens (the run waits) and is
    answered like any other. A run with nothing to ask again is a 409."""
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


class NoBody(Body):
    """An ask says nothing but who asks (the token's user): a field is a mistake, refused."""


class SupervisorAsked(Schema):
    run: str
    effect: int
    tool: str
    by: str
    asked_at: datetime
    # The notification that tells the supervisors, sent once its window closes; null when no
    # target is configured (RESUMER_WEBHOOK_URL, RESUMER_NOTIFY_EMAILS): then nobody was told.
    notification: int | None
    told: bool


@router.post(
    "/{run_id}/effects/{effect_id}/ask-supervisor",
    response={200: SupervisorAsked, **PROBLEMS},
    summary="Ask a supervisor to settle an effect of a stopped run (Idempotency-Key)",
)
def ask_a_supervisor(
    request: HttpRequest, run_id: str, effect_id: str, body: NoBody | None = None
) -> JsonResponse:
    """The run must be stopped and the effect not settled (confirmed or abandoned): otherwise
    a 404 when the path names no effect of this run (whatever its text), a 409 when the
    effect is settled, and nothing is recorded or sent."""
    require(request, roles.can_approve)
    run, who = find_run(run_id), ids.user_actor(request.user)
    pk = ids.parse_pk(effect_id)
    if pk is None or not Effect.objects.filter(pk=pk, run=run).exists():
        raise Problem(404, f"{run.public_id} has no effect {effect_id[:40]}", kind="not-found")

    def act() -> tuple[int, Any]:
        try:
            ask = ask_supervisor(pk, actor=who)
        except AskRefused as exc:
            raise Problem(409, str(exc), kind="not-asked") from None
        ask.refresh_from_db(fields=["created_at"])
        return 200, {
            "run": run.public_id,
            "effect": pk,
            "tool": ask.effect.tool,
            "by": who,
            "asked_at": ask.created_at.isoformat(),
            "notification": ask.notification_id,
            "told": ask.notification_id is not None,
        }

    return idempotency.run(request, {"effect": pk}, act)

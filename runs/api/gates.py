"""Gates: the open gates (oldest first, keyset by id), one gate, and its answer through
gates.answers.answer, the one answering flow: the gate's role (a supervisor may answer any),
its form, the compare-and-set ("already answered by X at T")."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, Subquery
from django.http import HttpRequest, JsonResponse
from ninja import Query, Router

from runs import ids
from runs.access import roles
from runs.api import idempotency
from runs.api.common import require
from runs.api.problems import Problem
from runs.api.schemas import PROBLEMS, AnsweredOut, AnswerIn, GateOut, GatePage
from runs.gates import answers
from runs.gates.acts import act_of
from runs.gates.decision import gate_digest
from runs.models import Gate, GateStatus

router = Router(tags=["gates"])
MAX_PAGE = 100
GATE_FIELDS = [name for name in GateOut.model_fields if name not in ("id", "run", "act", "digest")]


def gate_out(gate: Gate) -> dict[str, Any]:
    act = act_of(gate.call)
    return {
        "id": gate.pk,
        "run": ids.run_id(gate.run_id),
        **{name: getattr(gate, name) for name in GATE_FIELDS},
        "act": act.text if act is not None and act.needs_tick else "",
        "digest": gate_digest(gate),
    }


def find_gate(gate_id: str) -> Gate:
    pk = ids.parse_pk(gate_id)
    gate = Gate.objects.filter(pk=pk).first() if pk is not None else None
    if gate is None:
        raise Problem(404, f"there is no gate {gate_id[:40]!r}", kind="not-found")
    return gate


@router.get("", response={200: GatePage, **PROBLEMS}, summary="The gates waiting for a human")
def list_gates(
    request: HttpRequest, after: Query[str | None] = None, limit: Query[int] = 50
) -> dict[str, Any]:
    """Oldest first (the inbox's "waiting for a decision"); pass `next_after` as `after`."""
    require(request, roles.can_view)
    if not 1 <= limit <= MAX_PAGE:
        raise Problem(400, f"limit is from 1 to {MAX_PAGE}")
    gates = Gate.objects.filter(status=GateStatus.OPEN)
    if after is not None:
        pk = ids.parse_pk(after)
        if pk is None:
            raise Problem(400, "after is a gate id (digits), the last of the previous page")
        # Keyset on (created_at, id), compared inside the database (gate_open_idx).
        at = Subquery(Gate.objects.filter(pk=pk).values("created_at")[:1])
        gates = gates.filter(Q(created_at__gt=at) | Q(created_at=at, pk__gt=pk))
    rows = list(gates.order_by("created_at", "pk")[: limit + 1])
    return {
        "items": [gate_out(g) for g in rows[:limit]],
        "next_after": rows[limit - 1].pk if len(rows) > limit else None,
    }


@router.get("/{gate_id}", response={200: GateOut, **PROBLEMS}, summary="One gate")
def read_gate(request: HttpRequest, gate_id: str) -> dict[str, Any]:
    require(request, roles.can_view)
    return gate_out(find_gate(gate_id))


@router.post(
    "/{gate_id}/answer",
    response={200: AnsweredOut, **PROBLEMS},
    summary="Answer a gate with its form's fields (Idempotency-Key honoured)",
)
def answer_gate(request: HttpRequest, gate_id: str, body: AnswerIn) -> JsonResponse:
    """403 when the gate is not for your role, 422 with the form's errors when the answer
    does not fit it (an approval of a call that costs money or cannot simply be made again
    needs `confirm_act: true`), 409 when someone answered first (who, and when), when the
    deadline passed (`deadline-passed`: the time-out decides), when you voted already, or
    when `digest` is not the gate's (`stale-gate`: the problem's `digest` is the fresh one)."""
    require(request, roles.can_approve)
    gate, who = find_gate(gate_id), ids.user_actor(request.user)
    held = roles.roles(request.user)

    def act() -> tuple[int, Any]:
        unknown = answers.unknown_fields(gate, body.answer)
        if unknown:
            fields = ", ".join(answers.form_for(gate).fields)
            raise Problem(
                422,
                f"this gate's form has no field {', '.join(unknown)}; its fields are {fields}; "
                "nothing was recorded",
                kind="invalid-answer",
                errors={name: [{"message": "not a field of this gate's form"}] for name in unknown},
            )
        try:
            done = answers.answer(
                gate.pk,
                body.answer,
                actor=who,
                roles=held,
                user=request.user.pk,
                digest=body.digest,
            )
        except answers.NotAllowed as exc:
            raise Problem(403, str(exc), kind="forbidden") from None
        except answers.StaleAnswer as exc:
            raise Problem(409, str(exc), kind="stale-gate", digest=exc.digest) from None
        except answers.InvalidAnswer as exc:
            errors = exc.form.errors.get_json_data() if exc.form is not None else {}
            raise Problem(422, str(exc), kind="invalid-answer", errors=errors) from None
        except answers.DeadlinePassed as exc:
            raise Problem(409, str(exc), kind="deadline-passed") from None
        except answers.AlreadyAnswered as exc:
            raise Problem(409, str(exc), kind="already-answered") from None
        except answers.AnswerRefused as exc:  # closed with its run, a vote given twice...
            raise Problem(409, str(exc), kind="not-answerable") from None
        done.gate.refresh_from_db()
        body_out = {"gate": gate_out(done.gate), "final": done.final, "missing": done.missing}
        return 200, AnsweredOut.model_validate(body_out).model_dump(mode="json")

    return idempotency.run(request, body.model_dump(mode="json"), act)

"""The gate pages: one gate (its question, the context a reviewer needs, the pending call,
the form, a preview of the diff, its history), its answer, and identical gates answered
together. Reading needs any role; answering needs operator or supervisor, and then the gate's
own role (runs/gates/answers.py decides, whatever the page showed)."""

from __future__ import annotations

from django import forms as django_forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from runs import ids
from runs.access import roles
from runs.access.guards import operator_required, viewer_required
from runs.dashboard.gate_forms import BulkAnswer, BulkScopeForm, bulk_answer, digests
from runs.dashboard.views import _found
from runs.gates import answers
from runs.gates.acts import TICK, act_of, total
from runs.gates.decision import gate_digest
from runs.gates.sent_back import FAILING
from runs.gates.shared import shared
from runs.models import Gate, GateRole
from runs.reads import gates as gate_queries


def _gate(run_pk: int, pk: int) -> Gate:
    return _found(gate_queries.get_gate(run_pk, pk), f"run-{run_pk} has no gate {pk}.")


def who_may_answer(gate: Gate) -> str:
    supervisor = gate.role == GateRole.SUPERVISOR
    who = "a supervisor" if supervisor else "an operator or a supervisor"
    if gate.quorum > 1:
        who += f" ({gate.quorum} different people must give the same answer)"
    return who


def _render_gate(
    request: HttpRequest,
    gate: Gate,
    *,
    form: django_forms.Form | None = None,
    refusal: str = "",
    unsent: list[tuple[str, str]] | None = None,
    status: int = 200,
) -> HttpResponse:
    page = gate_queries.gate_page(gate)
    may_answer = gate.is_open and gate.may_answer(roles.roles(request.user))
    if may_answer and form is None:
        form = answers.form_for(gate)
    context = {
        "page": page,
        "gate": gate,
        "run": gate.run,
        "form": form if may_answer else None,
        "may_answer": may_answer,
        "who": who_may_answer(gate),
        "refusal": refusal,
        "unsent": unsent or [],
        "answer_diff": gate_queries.diff_lines(gate.diff or {}),
        # What the answer says it was given to: a page shown before the gate changed is
        # refused (409) with the fresh gate.
        "digest": gate_digest(gate),
        "act": act_of(gate.call),
    }
    return render(request, "runs/gate.html", context, status=status)


@require_GET
@viewer_required
def gate_detail(request: HttpRequest, run_pk: int, pk: int) -> HttpResponse:
    return _render_gate(request, _gate(run_pk, pk))


@require_POST
@operator_required
def gate_preview(request: HttpRequest, run_pk: int, pk: int) -> HttpResponse:
    """What the answer would change, before it is sent: answers.clean validates it with the
    gate's form (and an edited call with its tool's schema) and diffs it against what was
    shown, with the edited call's price; nothing is written. Always 200, so htmx swaps the
    errors in too."""
    gate = _gate(run_pk, pk)
    try:
        # A gate answered (or changed) since the page was shown is said so before a preview
        # that would read as if the answer could still be sent.
        answers.check_answerable(gate, request.POST.get("digest", ""))
        answer, diff = answers.clean(gate, request.POST, preview=True)
    except answers.InvalidAnswer as exc:
        context = {"gate": gate, "form": exc.form, "problem": str(exc)}
        return render(request, "runs/_gate_diff.html", context)
    except answers.AnswerRefused as exc:  # AlreadyAnswered, StaleAnswer included
        return render(request, "runs/_gate_diff.html", {"gate": gate, "refusal": str(exc)})
    context = {
        "gate": gate,
        "answer": answer,
        "diff": gate_queries.diff_lines(diff),
        "previewed": True,
    }
    return render(request, "runs/_gate_diff.html", context)


@require_POST
@operator_required
def gate_answer(request: HttpRequest, run_pk: int, pk: int) -> HttpResponse:
    gate = _gate(run_pk, pk)
    try:
        done = answers.answer(
            gate.pk,
            request.POST,
            actor=ids.user_actor(request.user),
            roles=roles.roles(request.user),
            user=request.user.pk,
            digest=request.POST.get("digest", ""),
        )
    except answers.NotAllowed as exc:
        raise PermissionDenied(f"{exc}; nothing was recorded.") from None
    except answers.InvalidAnswer as exc:
        form = exc.form if exc.form is not None else answers.form_for(gate, request.POST)
        return _render_gate(request, gate, form=form, refusal=str(exc), status=400)
    except answers.AnswerRefused as exc:  # AlreadyAnswered, DeadlinePassed included
        # What was typed is shown back, not recorded: a second tab's notes are not lost.
        fields = answers.form_for(gate).fields
        unsent = [
            (str(field.label or name), str(request.POST[name]))
            for name, field in fields.items()
            if name != TICK and str(request.POST.get(name, "")).strip()
        ]
        return _render_gate(request, _gate(run_pk, pk), refusal=str(exc), unsent=unsent, status=409)
    answered = f"Answered {gate.stage}/{gate.gate_id}"
    if done.final and (done.gate.answer or {}).get("decision") == FAILING.get(gate.kind):
        # Not "goes on": the stage is handed an answer that sends the work back, or a call's
        # rejection, and what it does with it is its own (the demo's stops the run).
        messages.info(
            request,
            f"{answered}: {gate.stage} is handed your answer; if it cannot go on with it, "
            f"{gate.run.public_id} stops and Ask again reopens this gate.",
        )
    elif done.final:
        messages.success(request, f"{answered}: {gate.run.public_id} goes on at {gate.stage}.")
    else:
        messages.info(
            request,
            f"Your answer to {gate.stage}/{gate.gate_id} is recorded; "
            f"{done.missing} more needed before {gate.run.public_id} goes on.",
        )
    return redirect("runs:run", pk=gate.run_id)


# --- Identical gates, answered together ------------------------------------------------------


def _render_group(
    request: HttpRequest,
    shape: str,
    *,
    scope: BulkScopeForm | None = None,
    bulk: BulkAnswer | None = None,
    status: int = 200,
) -> HttpResponse:
    gates = _found(gate_queries.gate_group(shape), "No gate of this shape is waiting now.")
    first = gates[0]
    # The gates of a shape share their role: one the user may not answer offers no form, as
    # a single gate's page offers none.
    if bulk is None and first.may_answer(roles.roles(request.user)):
        bulk = bulk_answer(gates)
    context = {
        "shape": shape,
        "gates": gates,
        "first": first,
        "bulk": bulk,
        "form": bulk.form if bulk is not None else None,
        "scope": scope,
        "who": who_may_answer(first),
        "total": total([g.act for g in gates if g.act is not None]) if first.call else None,
        # The fields each run answers itself: said to everyone, not only to who may answer.
        "differ": (bulk.shared if bulk is not None else shared(gates)).differ,
    }
    return render(request, "runs/gate_group.html", context, status=status)


@require_GET
@viewer_required
def gate_group(request: HttpRequest, shape: str) -> HttpResponse:
    return _render_group(request, shape)


@require_POST
@operator_required
def gate_group_answer(request: HttpRequest, shape: str) -> HttpResponse:
    """One answer to the shown (or ticked) gates of a shape: the form offers what the shown
    gates share (runs/gates/shared.py), each gate is checked on its own by
    answers.answer_many (its role, its form, still open, still showing what the page showed).
    What was answered and what was skipped, and why."""
    scope = BulkScopeForm(request.POST)
    if not scope.is_valid():
        if gate_queries.gate_group(shape) is None:
            return render(request, "runs/gate_group_result.html", {"shape": shape}, status=409)
        return _render_group(request, shape, scope=scope, status=400)
    shown = gate_queries.gates_of_shape(shape, scope.cleaned_data["shown"])
    if not shown:
        return render(request, "runs/gate_group_result.html", {"shape": shape}, status=409)
    bulk = bulk_answer(shown, request.POST)
    if not bulk.is_valid():
        return _render_group(request, shape, scope=scope, bulk=bulk, status=400)
    pks = scope.gate_pks()
    try:
        result = answers.answer_many(
            pks,
            bulk.data(),
            shape=shape,
            actor=ids.user_actor(request.user),
            roles=roles.roles(request.user),
            user=request.user.pk,
            digests=digests(request.POST, pks),
        )
    except answers.InvalidAnswer as exc:
        bulk.form.add_error(None, str(exc))
        return _render_group(request, shape, scope=scope, bulk=bulk, status=400)
    named = gate_queries.gates_by_pk(
        [a.gate.pk for a in result.answered] + [pk for pk, _ in result.skipped]
    )
    context = {
        "shape": shape,
        "answered": [named.get(a.gate.pk, a.gate) for a in result.answered],
        "skipped": [(named.get(pk), pk, why) for pk, why in result.skipped],
    }
    status = 200 if result.answered else 409
    return render(request, "runs/gate_group_result.html", context, status=status)

"""The ways out of a stop that are not an approval: acknowledging a finished run's deviation
(an operator, with a reason), asking a confirmation again after its target refused the call,
closing a stopped run out (an operator, with a reason), and one effect's page, where a
supervisor asks the effect's target what it holds (a POST, recorded as TARGET_ASKED) and
records that answer in the ledger in one click, and where an operator asks a supervisor to
settle it (runs/asks.py). Each view: check who asks, call one domain function, redirect to the
page that shows the result (a reload never posts twice)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from runs import ids
from runs.access import roles
from runs.access.guards import operator_required, supervisor_required, viewer_required
from runs.asks import AskRefused, ask_supervisor
from runs.dashboard.forms import AskAgainForm, CloseOutForm
from runs.dashboard.views import _found, _run
from runs.events import read
from runs.gates.reopen import AskAgainRefused, ask_again
from runs.ledger.append import LedgerError
from runs.models import Effect, Run
from runs.planning.acknowledge import AcknowledgeRefused, acknowledge
from runs.planning.close_out import CloseRefused, InvalidReason, close_out
from runs.planning.target_lookup import LookupRefused, ask_target, record_answer
from runs.reads.effect_page import effect_page, get_effect, target_name
from runs.reads.run_page import run_page


@require_POST
@operator_required
def acknowledge_deviation(request: HttpRequest, pk: int) -> HttpResponse:
    run = _run(pk)
    try:
        event = acknowledge(
            run.pk, request.POST.get("reason", ""), actor=ids.user_actor(request.user)
        )
    except AcknowledgeRefused as exc:
        page = run_page(run, None)
        context = {"page": page, "run": run, "ack_error": f"Not acknowledged: {exc}."}
        return render(request, "runs/run_detail.html", context, status=409)
    messages.success(
        request,
        f"{run.public_id}'s deviation is acknowledged (event #{event.seq}); "
        "the run has left the inbox.",
    )
    return redirect("runs:run", pk=run.pk)


def _refused_page(request: HttpRequest, run: Run, status: int, **said: object) -> HttpResponse:
    """The run page again, saying why the POST changed nothing."""
    run.refresh_from_db()
    page = run_page(run, None, logs=roles.can_approve(request.user))
    return render(
        request, "runs/run_detail.html", {"page": page, "run": run, **said}, status=status
    )


@require_POST
@operator_required
def ask_again_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Reopen the confirmation whose answer's call the target refused: the run waits at it."""
    run = _run(pk)
    form = AskAgainForm(request.POST)
    if not form.is_valid():
        return _refused_page(request, run, 400, ask_error="Not asked: no gate was named.")
    try:
        gate = ask_again(
            run.pk, actor=ids.user_actor(request.user), gate_pk=form.cleaned_data["gate"]
        )
    except AskAgainRefused as exc:
        return _refused_page(request, run, 409, ask_error=f"Not asked: {exc}.")
    messages.success(
        request,
        f"{gate.stage}/{gate.gate_id} is asked again (attempt {len(gate.attempts) + 1}); "
        f"{run.public_id} waits for the answer.",
    )
    return redirect("runs:gate", run_pk=run.pk, pk=gate.pk)


@require_POST
@operator_required
def close_run(request: HttpRequest, pk: int) -> HttpResponse:
    run = _run(pk)
    form = CloseOutForm(request.POST)
    if not form.is_valid():
        return _refused_page(request, run, 400, close_form=form)
    try:
        event = close_out(run.pk, form.cleaned_data["reason"], actor=ids.user_actor(request.user))
    except InvalidReason as exc:
        form.add_error("reason", str(exc))
        return _refused_page(request, run, 400, close_form=form)
    except CloseRefused as exc:
        return _refused_page(request, run, 409, close_error=f"Not closed: {exc}.")
    unsettled = len(read(event).unsettled)
    messages.success(
        request,
        f"{run.public_id} is closed out (event #{event.seq}) and has left the inbox."
        + (
            f" {unsettled} effect{'s stay' if unsettled != 1 else ' stays'} unsettled: closing "
            "settles nothing outside."
            if unsettled
            else ""
        ),
    )
    return redirect("runs:run", pk=run.pk)


def _effect(run_pk: int, pk: int) -> Effect:
    return _found(get_effect(run_pk, pk), f"run-{run_pk} has no effect {pk}.")


@require_GET
@viewer_required
def effect_detail(request: HttpRequest, run_pk: int, pk: int) -> HttpResponse:
    page = effect_page(_effect(run_pk, pk))
    return render(request, "runs/effect.html", {"page": page, "run": page.run})


@require_POST
@supervisor_required
def effect_ask(request: HttpRequest, run_pk: int, pk: int) -> HttpResponse:
    """Ask the effect's target what it holds: on this POST only, recorded."""
    effect = _effect(run_pk, pk)
    try:
        event = ask_target(effect.pk, actor=ids.user_actor(request.user))
    except LookupRefused as exc:
        messages.error(request, f"Not asked: {exc}.")
    else:
        # The target by the name its page says (the card processor), not its account@platform.
        target = target_name(effect, Run.objects.get(pk=effect.run_id))
        messages.info(request, f"The {target} answered; recorded as event #{event.seq}.")
    return redirect("runs:effect", run_pk=effect.run_id, pk=effect.pk)


@require_POST
@supervisor_required
def effect_record(request: HttpRequest, run_pk: int, pk: int) -> HttpResponse:
    """Record the target's recorded answer in the ledger: one edit naming the question."""
    effect = _effect(run_pk, pk)
    asked = request.POST.get("asked", "")
    try:
        if not (asked.isascii() and asked.isdigit() and len(asked) <= 12):
            raise LookupRefused("the form did not say which answer to record; ask again")
        event = record_answer(effect.pk, int(asked), actor=ids.user_actor(request.user))
    except (LookupRefused, LedgerError) as exc:
        messages.error(request, f"Not recorded: {exc}.")
        return redirect("runs:effect", run_pk=effect.run_id, pk=effect.pk)
    messages.success(
        request,
        f"Recorded as event #{event.seq} (LEDGER_EDITED); the plan is being computed again.",
    )
    return redirect("runs:run", pk=effect.run_id)


@require_POST
@operator_required
def effect_ask_supervisor(request: HttpRequest, run_pk: int, pk: int) -> HttpResponse:
    """Ask a supervisor to settle the effect: recorded, and sent as a notification."""
    effect = _effect(run_pk, pk)
    try:
        ask = ask_supervisor(effect.pk, actor=ids.user_actor(request.user))
    except AskRefused as exc:
        messages.error(request, f"Not asked: {exc}.")
    else:
        if ask.notification_id is None:
            messages.warning(
                request,
                "Recorded, but no notification target is configured (RESUMER_WEBHOOK_URL, "
                "RESUMER_NOTIFY_EMAILS): nobody was told; tell a supervisor yourself.",
            )
        else:
            messages.success(
                request,
                f"A supervisor is asked: notification {ask.notification_id} goes out within "
                f"{settings.RESUMER_NOTIFY_WINDOW:g} s.",
            )
    return redirect("runs:effect", run_pk=effect.run_id, pk=effect.pk)

"""Answering a gate: the one flow the dashboard, the bulk view and the sweeper's time-out
share. Who may answer is the gate's role (a supervisor may answer any gate); the answer is
validated by the gate's own form; it is recorded by compare-and-set under the run's and the
gate's row locks, so of two people answering at once exactly one answer is recorded and the
other is told who answered first. The last answer a gate needs (its quorum) queues the stage
again by ticket; the stage then finds the recorded answer (runs/execution/asking.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django import forms as django_forms
from django.db import transaction
from django.utils import timezone

from runs import enqueue
from runs.gates import arguments, forms
from runs.ledger import gates as gate_rows
from runs.ledger import leases
from runs.ledger.append import Writer
from runs.models import Gate, GateKind, GateStatus, Run

TIME_OUT = "time-out"


class AnswerRefused(Exception):
    """Nothing was recorded; the message says why, for the person who answered."""


class NotAllowed(AnswerRefused):
    """The person's role may not answer this gate."""


class AlreadyAnswered(AnswerRefused):
    pass


class InvalidAnswer(AnswerRefused):
    def __init__(self, message: str, form: django_forms.Form | None = None) -> None:
        super().__init__(message)
        self.form = form


@dataclass(frozen=True)
class Answered:
    gate: Gate
    final: bool
    # Votes still needed before the stage goes on (quorum gates).
    missing: int = 0


def form_for(gate: Gate, data: Any = None, prefix: str = "") -> django_forms.Form:
    """The gate's form, rebuilt from what its event recorded (bound to `data` when given)."""
    return forms.build(gate.form, gate.initial, data=data, prefix=prefix)


def clean(gate: Gate, data: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answer the form accepts and its diff against what was shown. Raises InvalidAnswer
    (with the bound form, for its errors) otherwise; nothing is written either way."""
    form = form_for(gate, data)
    if not form.is_valid():
        raise InvalidAnswer("the answer does not fit the form: " + form.errors.as_text(), form)
    cleaned = forms.jsonable(form.cleaned_data)
    if gate.kind != GateKind.CONFIRM:
        return cleaned, forms.diff(gate.initial, cleaned)
    if cleaned.get("decision") == forms.REJECT and not cleaned.get("reason", "").strip():
        form.add_error("reason", "Say why the call is rejected: the stage is told.")
        raise InvalidAnswer("a rejection needs a reason", form)
    args = dict(gate.call["args"])
    if cleaned["decision"] == forms.APPROVE:  # a rejected call is not made: its edits are moot
        args = edited_args(gate, form, cleaned)
    answer = {"decision": cleaned["decision"], "reason": cleaned.get("reason", ""), "args": args}
    return answer | {"cost": price(gate, form, args)}, forms.diff(gate.call["args"], args)


def edited_args(gate: Gate, form: django_forms.Form, cleaned: dict[str, Any]) -> dict[str, Any]:
    """The arguments the approved call is made with: each edit read as its argument's kind and
    checked against the tool's schema (runs/gates/arguments.py). Raises InvalidAnswer with
    the form's field errors, before anything is written."""
    call = gate.call
    entered = {name: cleaned.get(f"arg_{name}") for name in call.get("editable", [])}
    try:
        return arguments.edited(call, entered, arguments.tool_of(gate.run.pipeline, call["tool"]))
    except arguments.EditRefused as exc:
        for name, messages in exc.errors.items():
            form.add_error(f"arg_{name}" if f"arg_{name}" in form.fields else None, messages)
        raise InvalidAnswer(f"the edited call does not fit: {exc}", form) from None


def price(gate: Gate, form: django_forms.Form, args: dict[str, Any]) -> str:
    """What the call costs with these arguments: as asked, its price when the gate opened;
    edited, the tool's price of the edited arguments (InvalidAnswer if it cannot say)."""
    if args == gate.call["args"]:
        return str(gate.call.get("cost", "0"))
    tool = arguments.tool_of(gate.run.pipeline, gate.call["tool"])
    try:
        return str(tool.price_of(args))
    except (ArithmeticError, LookupError, TypeError, ValueError) as exc:
        form.add_error(None, f"{gate.call['tool']} cannot price these arguments: {exc}")
        raise InvalidAnswer(f"the edited call cannot be priced: {exc}", form) from None


def answer(gate_pk: int, data: Any, *, actor: str, roles: Iterable[str]) -> Answered:
    """Record `actor`'s answer to an open gate. Raises NotAllowed, InvalidAnswer,
    AlreadyAnswered or AnswerRefused, having written nothing."""
    gate = Gate.objects.filter(pk=gate_pk).first()
    if gate is None:
        raise AnswerRefused(f"there is no gate {gate_pk}")
    if not gate.may_answer(frozenset(roles)):
        raise NotAllowed(f"this gate is for a {gate.get_role_display().lower()} to answer")
    answer_data, diff = clean(gate, data)
    return record(gate.pk, answer_data, diff, actor=actor)


def _refusal(gate: Gate, run: Run, actor: str, answer_data: dict[str, Any]) -> str:
    if gate.status == GateStatus.ANSWERED:
        at = timezone.localtime(gate.answered_at).strftime("%Y-%m-%d %H:%M:%S %Z")
        return f"already answered by {gate.answered_by} at {at}; nothing was changed"
    if gate.status != GateStatus.OPEN or not run.is_waiting:
        return f"this gate is no longer waiting ({gate.get_status_display().lower()})"
    if any(v["by"] == actor for v in gate.votes):
        return f"you answered already; {gate.quorum} different people must answer this gate"
    if gate.votes and answer_data.get("decision") != forms.REJECT:
        first = gate.votes[0]
        if first["answer"] != answer_data:
            return (
                f"{first['by']} answered differently; this gate needs {gate.quorum} people to "
                "give the same answer (or anyone to reject it)"
            )
    return ""


def record(
    gate_pk: int, answer_data: dict[str, Any], diff: dict[str, Any], *, actor: str
) -> Answered:
    """The compare-and-set: under the run's and the gate's locks, the gate must still be
    open and waiting for this person's answer."""
    run_pk = Gate.objects.values_list("run_id", flat=True).get(pk=gate_pk)
    with transaction.atomic():
        # The run first, as every writer locks it: the answer and a worker or a sweeper
        # serialise on it, and two answerers on the gate row just after.
        run = Run.objects.select_for_update().get(pk=run_pk)
        gate = Gate.objects.select_for_update().get(pk=gate_pk)
        refused = _refusal(gate, run, actor, answer_data)
        if refused:
            raise AlreadyAnswered(refused) if gate.answered_by else AnswerRefused(refused)
        final = len(gate.votes) + 1 >= gate.quorum or answer_data.get("decision") in (
            forms.REJECT,
            forms.REQUEST_CHANGES,
        )
        ticket = uuid.uuid4().hex if final else ""
        # A waiting run holds no lease: taking it over fences nobody, and gives the answer a
        # token to write under, like an approval.
        token = leases.acquire(run.pk, actor, takeover=True)
        gate_rows.record_answer(
            Writer(run.pk, token, actor), gate, answer_data, diff, final=final, ticket=ticket
        )
        leases.release(run.pk, token)
        if final:
            stage = gate.stage
            transaction.on_commit(lambda: enqueue.dispatch(run.pk, stage, ticket))
    return Answered(gate, final, 0 if final else gate.quorum - len(gate.votes))


@dataclass(frozen=True)
class BulkResult:
    answered: list[Answered]
    # (gate pk, why it was not answered)
    skipped: list[tuple[int, str]]


def answer_many(
    gate_pks: Iterable[int], data: Any, *, shape: str, actor: str, roles: Iterable[str]
) -> BulkResult:
    """The same answer to identical gates (one shape), each gate checked on its own: its role,
    its form, still open. A confirmation's edits are not given in bulk: each run's own call
    is made as it was asked (approve or reject only)."""
    done, skipped = [], []
    for pk in gate_pks:
        gate = Gate.objects.filter(pk=pk).first()
        if gate is None or gate.shape != shape:
            skipped.append((pk, "not a gate of this group"))
            continue
        # Each gate keeps what it showed for whatever the bulk answer leaves out: a review
        # approved in bulk publishes each run's own title and body, a confirmation each
        # run's own arguments (edits are not given in bulk).
        if gate.kind == GateKind.CONFIRM:
            own = dict(data) | {
                f"arg_{n}": gate.call["args"].get(n, "") for n in gate.call.get("editable", [])
            }
        else:
            own = {**gate.initial, **{k: v for k, v in dict(data).items() if v not in ("", None)}}
        try:
            done.append(answer(pk, own, actor=actor, roles=roles))
        except AnswerRefused as exc:
            skipped.append((pk, str(exc)))
    return BulkResult(done, skipped)

"""Answering a gate: the one flow the dashboard, the bulk view, the API and the sweeper's
time-out share. Who may answer is the gate's role (a supervisor may answer any gate); the
answer is validated by the gate's own form; it is recorded by compare-and-set under the run's
and the gate's row locks, so of two people answering at once exactly one answer is recorded
and the other is told who answered first, and an answer after the deadline (on the
database's clock, read as the gate is locked) is refused whether or not the sweeper has come
by yet. The last answer a gate needs (its quorum: votes of different signed-in users) queues
the stage again by ticket; the stage then finds the recorded answer
(runs/execution/asking.py). The time-out's default answer is not a vote: it settles the
gate."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django import forms as django_forms
from django.db import transaction
from django.utils import timezone

from runs import enqueue
from runs.gates import acts, arguments, forms, shared
from runs.gates import rows as gate_rows
from runs.gates.decision import gate_digest
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


class DeadlinePassed(AnswerRefused):
    """The gate's deadline passed (on the database's clock): its on_timeout decides now."""


class StaleAnswer(AnswerRefused):
    """The answer was given to what the gate showed before (its digest is not the gate's):
    `digest` is the one to answer now."""

    def __init__(self, message: str, digest: str) -> None:
        super().__init__(message)
        self.digest = digest


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
    """The gate's form, rebuilt from what its event recorded (bound to `data` when given),
    with the tick naming the act when approving the call needs one (runs/gates/acts.py)."""
    form = forms.build(
        gate.form, gate.initial, data=data, prefix=prefix, form_class=gate.form_class
    )
    act = acts.act_of(gate.call)
    if act is not None and act.needs_tick:
        # The act names the call as asked; an editable one may be approved as edited, which
        # the preview prices: the tick must not name only the asked amount.
        edits = " as asked, or as your edits make it" if gate.call.get("editable") else ""
        acts.add_tick(form, act.text + edits)
    return form


def unknown_fields(gate: Gate, data: dict[str, Any]) -> list[str]:
    """The names in an answer that the gate's form does not have (an argument that is not
    editable, a typo): a typed answer (the API) is refused for them rather than have them
    dropped, as the command line's --set refuses them. A browser's post carries its own
    extras (the CSRF token, the digest) and is not asked."""
    return sorted(set(data) - set(form_for(gate).fields))


def check_shown(gate: Gate, digest: str | None) -> None:
    """Raise StaleAnswer unless `digest` is the gate's (None: an internal caller who answers
    without a page, like the time-out)."""
    if digest is None:
        return
    fresh = gate_digest(gate)
    if digest != fresh:
        raise StaleAnswer(
            "what you were shown changed since it was shown (or the answer did not say what "
            "it answers): read the gate again and answer it anew; nothing was recorded",
            fresh,
        )


def clean(gate: Gate, data: Any, *, preview: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answer the form accepts and its diff against what was shown. Raises InvalidAnswer
    (with the bound form, for its errors) otherwise; nothing is written either way. A
    `preview` shows what an answer would change before the act's tick is asked for: the tick
    is checked only when the answer is sent."""
    form = form_for(gate, data)
    if not form.is_valid():
        if not preview:
            acts.tick_missing(form)  # said with the other errors, not after them
        raise InvalidAnswer("the answer does not fit the form: " + forms.errors_said(form), form)
    if not preview and acts.tick_missing(form):
        if gate.kind == GateKind.CONFIRM:
            # An edit the tool refuses is said beside the missing tick, not after it.
            with contextlib.suppress(InvalidAnswer):
                edited_args(gate, form, forms.jsonable(form.cleaned_data))
        raise InvalidAnswer("approving needs the tick that names what it does", form)
    cleaned = forms.jsonable(form.cleaned_data)
    if gate.kind != GateKind.CONFIRM:
        return cleaned, forms.diff(forms.as_shown(form, gate.initial), cleaned)
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


def answer(
    gate_pk: int,
    data: Any,
    *,
    actor: str,
    roles: Iterable[str],
    user: int | None = None,
    digest: str | None = None,
) -> Answered:
    """Record `actor`'s answer to an open gate. `user` is the pk of the signed-in user the
    session or the token belongs to (every face passes it): a quorum's votes are counted by
    it. `digest` is the gate_digest of what the person was shown; every face passes it (None
    only for internal callers). Raises NotAllowed, StaleAnswer, InvalidAnswer,
    AlreadyAnswered, DeadlinePassed or AnswerRefused, having written nothing."""
    gate = Gate.objects.filter(pk=gate_pk).first()
    if gate is None:
        raise AnswerRefused(f"there is no gate {gate_pk}")
    if not gate.may_answer(frozenset(roles)):
        who = acts.with_article(gate.get_role_display().lower())
        raise NotAllowed(f"this gate is for {who} to answer")
    # A gate answered meanwhile is said so whatever this answer holds, before its form is
    # read: its errors would only be about a question nobody can answer any more.
    check_answerable(gate, digest)
    answer_data, diff = clean(gate, data)
    return record(gate.pk, answer_data, diff, actor=actor, user=user, digest=digest)


def _when(moment) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")


def check_answerable(gate: Gate, digest: str | None) -> None:
    """Raise AlreadyAnswered or AnswerRefused when nobody can answer `gate` any more, and
    StaleAnswer when it changed since `digest` was shown: what an answer and its preview
    check first, read without locks (record() checks again under them)."""
    closed = _closed(gate, gate.run)
    if closed is not None:
        raise closed
    check_shown(gate, digest)


def _closed(gate: Gate, run: Run) -> AnswerRefused | None:
    """Why nobody's answer can be recorded any more, or None."""
    if gate.status == GateStatus.ANSWERED:
        at = _when(gate.answered_at)
        return AlreadyAnswered(
            f"already answered by {gate.answered_by} at {at}; nothing was changed"
        )
    if gate.status != GateStatus.OPEN or not run.is_waiting:
        return AnswerRefused(
            f"this gate is no longer waiting ({gate.get_status_display().lower()})"
        )
    return None


def _refusal(
    gate: Gate, run: Run, actor: str, user: int | None, answer_data: dict[str, Any]
) -> AnswerRefused | None:
    """Why this person's answer cannot be recorded now, or None; read under the locks."""
    closed = _closed(gate, run)
    if closed is not None:
        return closed
    if gate.overdue:
        return DeadlinePassed(
            f"the deadline passed at {_when(gate.deadline)}; {gate.timeout_outcome} "
            "(your answer was not recorded)"
        )
    if gate.quorum > 1 and user is None:
        return AnswerRefused(
            "a vote towards a quorum must come from a signed-in person; nothing was recorded"
        )
    mine = next((v for v in gate.votes if v["by"] == actor or _same_user(v, user)), None)
    if mine is not None:
        return AnswerRefused(
            f"you answered already (as {mine['by']}); {gate.quorum} different people must "
            "answer this gate, and nothing was recorded"
        )
    if gate.votes and answer_data.get("decision") != forms.REJECT:
        first = gate.votes[0]
        if first["answer"] != answer_data:
            return AnswerRefused(
                f"{first['by']} answered differently; this gate needs {gate.quorum} people to "
                "give the same answer (or anyone to reject it)"
            )
    return None


def _same_user(vote: dict[str, Any], user: int | None) -> bool:
    return user is not None and vote.get("user") == user


def _timeout_refusal(gate: Gate, run: Run) -> AnswerRefused | None:
    if gate.status != GateStatus.OPEN or not run.is_waiting:
        return AnswerRefused(
            f"this gate is no longer waiting ({gate.get_status_display().lower()})"
        )
    if not gate.overdue:
        return AnswerRefused("the gate's deadline has not passed")
    return None


def record(
    gate_pk: int,
    answer_data: dict[str, Any],
    diff: dict[str, Any],
    *,
    actor: str,
    user: int | None = None,
    timed_out: bool = False,
    digest: str | None = None,
) -> Answered:
    """The compare-and-set: under the run's and the gate's locks, the gate must still be
    open, its deadline not passed on the database's clock (read in the statement that locks
    the gate), waiting for this person's answer, and showing what they answered (`digest`).
    The time-out's answer (`timed_out`, timeouts.expire) needs the deadline passed instead,
    and settles the gate whatever the votes so far: it is not a vote."""
    run_pk = Gate.objects.values_list("run_id", flat=True).get(pk=gate_pk)
    with transaction.atomic():
        # The run first, as every writer locks it: the answer and a worker or a sweeper
        # serialise on it, and two answerers on the gate row just after.
        run = Run.objects.select_for_update().get(pk=run_pk)
        gate = Gate.objects.on_db_clock().select_for_update().get(pk=gate_pk)
        if timed_out:
            refused = _timeout_refusal(gate, run)
        else:
            refused = _refusal(gate, run, actor, user, answer_data)
        if refused is not None:
            raise refused
        check_shown(gate, digest)
        final = (
            timed_out
            or len(gate.votes) + 1 >= gate.quorum
            or answer_data.get("decision") in (forms.REJECT, forms.REQUEST_CHANGES)
        )
        ticket = uuid.uuid4().hex if final else ""
        with leases.taken_over(run.pk, actor) as token:
            gate_rows.record_answer(
                Writer(run.pk, token, actor),
                gate,
                answer_data,
                diff,
                final=final,
                ticket=ticket,
                user=user,
                timed_out=timed_out,
            )
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
    gate_pks: Iterable[int],
    data: Any,
    *,
    shape: str,
    actor: str,
    roles: Iterable[str],
    user: int | None = None,
    digests: dict[int, str] | None = None,
) -> BulkResult:
    """One answer to identical gates (one shape), each gate checked on its own: its role,
    its form, still open, and (`digests`, from a page) still showing what was shown. The
    answer gives only what the gates share (runs/gates/shared.py); every other field keeps
    each run's own value, so a review approved in bulk publishes each run's own title and
    body, and a confirmation makes each run's own call (edits are not given in bulk). Raises
    InvalidAnswer, writing nothing, when the answer gives a field the gates do not share, or
    the gates' form refuses it."""
    pks = list(gate_pks)
    found = {g.pk: g for g in Gate.objects.filter(pk__in=pks, shape=shape)}
    given = dict(data)
    differ = shared.not_shared([found[pk] for pk in pks if pk in found], given)
    if differ:
        raise InvalidAnswer(
            f"{', '.join(differ)} differ from run to run: each run answers them itself, "
            "on its own page; nothing was recorded"
        )
    first = next((found[pk] for pk in pks if pk in found), None)
    if first is not None:
        # They share a shape, so one form and one form class: a rule of the form that every
        # gate would refuse the answer by (notes to send work back) is said once, on the
        # answer, rather than as a skip of each gate. Raises InvalidAnswer, writing nothing.
        clean(first, shared.shown(first) | given, preview=True)
    done, skipped = [], []
    for pk in pks:
        gate = found.get(pk)
        if gate is None:
            skipped.append((pk, "not a gate of this group"))
            continue
        shown = None if digests is None else digests.get(pk, "")
        try:
            own = shared.shown(gate) | given
            done.append(answer(pk, own, actor=actor, roles=roles, user=user, digest=shown))
        except AnswerRefused as exc:
            skipped.append((pk, str(exc)))
    return BulkResult(done, skipped)

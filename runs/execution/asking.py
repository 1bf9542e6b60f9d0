"""How a stage asks a human (its StageContext holds the gates): `ask()` for a question, and
the confirmation a tool requires before its first call, which the durable call asks here
before any intent is written, so nothing has happened when the run stops.

    decide (gates.decision: the recorded answer for this subject, or ask) → hold it against
    the approved plan → use the recorded answer, or open the gate (GATE_OPENED, the run
    *waiting*) and stop the stage: the worker and the lease are free until the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from runs.execution.durable_call import Returned, StageStopped
from runs.execution.stage_state import StagePart, StageState
from runs.gates import arguments, forms
from runs.gates import rows as gate_rows
from runs.gates.decision import GateAction, call_subject, decide, question_subject, shape
from runs.ledger import effects
from runs.ledger.canonical import canonical_json
from runs.ledger.chain import digest
from runs.models import Gate, GateKind, GateRole
from runs.pipeline import CallRejected, KeyParts, OnTimeout, Tool
from runs.planning.replay_log import request_hash
from runs.review import OnReject, Review

# The question is the gate page's heading; what the reviewer reads goes in details.
MAX_QUESTION = 200
MAX_DETAILS = 20_000


# reentry.Reentry.question_changed: (gate id, what its answer was given to, what is asked).
QuestionChanged = Callable[[str, dict[str, Any], dict[str, Any]], None]


def _shown(gate: Gate) -> dict[str, Any]:
    return {"question": gate.question, "details": gate.details, "initial": gate.initial}


class StageWaiting(StageStopped):
    """The stage asked a human: GATE_OPENED is written and the run waits for the answer."""


class Asking(StagePart):
    """The gates of a stage (its StageContext holds them)."""

    def __init__(self, state: StageState, changed: QuestionChanged) -> None:
        super().__init__(state)
        # The answers this run of the stage used, by gate id (ctx.review).
        self._reviews: dict[str, Review] = {}
        # An answered question asked again showing something else (reentry.py).
        self._changed = changed

    def review(self, call_id: str) -> Review | None:
        return self._reviews.get(call_id)

    def ask(
        self,
        gate_id: str,
        question: str,
        *,
        form: Any = None,
        initial: dict[str, Any] | None = None,
        role: str = GateRole.OPERATOR,
        quorum: int = 1,
        timeout: timedelta | None = None,
        on_timeout: OnTimeout | None = None,
        escalate_to: str = "",
        details: str = "",
    ) -> dict[str, Any]:
        _check_text(question, details)
        spec = forms.describe(form or forms.DecisionForm)
        # Where its clean() is found again by the process that answers (forms.build).
        form_class = forms.class_path(form) if form is not None else ""
        shown = forms.jsonable(dict(initial or {}))
        subject = question_subject(question, spec, shown, details)
        gate = gate_rows.find(self.run, self.stage, gate_id, subject)
        earlier = (
            gate_rows.answered_otherwise(self.run, self.stage, gate_id, subject)
            if gate is None
            else None
        )
        if earlier is not None:
            asked = {"question": question, "details": details, "initial": shown}
            self._changed(gate_id, _shown(earlier), asked)  # stops the stage, or asks anew
        if self._decided(gate_id, gate) == GateAction.USE_ANSWER:
            return dict(gate.answer)
        _check_timeout(spec, shown, form_class, timeout, on_timeout)
        self._open(
            gate_id,
            {
                "kind": GateKind.QUESTION,
                "subject": subject,
                "question": question,
                "details": details,
                "form": spec,
                "form_class": form_class,
                "initial": shown,
                "call": {},
            },
            role=role,
            quorum=quorum,
            timeout=timeout,
            on_timeout=on_timeout,
            escalate_to=escalate_to,
        )

    def confirmed(
        self, call_id: str, tool: Tool, args: dict[str, Any]
    ) -> tuple[dict[str, Any], KeyParts | None] | Returned:
        """The arguments the call goes on with, once a human confirmed it, and its key parts
        when a reviewer edited them (a new revision: the edited request's own key). Opens the
        gate (StageWaiting) before a first call that needs it; raises CallRejected for a
        rejected one (or returns it as the call's result: Confirm(on_reject="return")). A call already attempted (its key has an effect) is not asked about:
        confirmation is before the first call, and replay decides the rest."""
        confirm = tool.confirmation
        if confirm.on_reject not in tuple(OnReject):
            raise ValueError(f"tool {tool.name}: on_reject is one of {', '.join(OnReject)}")
        _check_text("", confirm.description)
        subject = call_subject(request_hash(tool.name, args))
        gate = gate_rows.find(self.run, self.stage, call_id, subject)
        if gate is not None and gate.status == Gate.Status.ANSWERED:
            self._decided(call_id, gate)
            return self._apply(call_id, tool, gate, args)
        parts = tool.key(self.ctx, args)
        if effects.find(parts.key) is not None or not confirm.required(self.ctx, args):
            return args, None
        self._decided(call_id, gate)
        # What the page shows and checks an edit by: each editable argument's kind and rules,
        # and the tool's schema (runs/gates/arguments.py).
        described, schema = arguments.describe(tool, args)
        call = {
            "tool": tool.name,
            "policy": str(tool.policy),
            "target": parts.target,
            "args": args,
            "cost": str(tool.price_of(args)),
            "meter": tool.meter,
            "verb": tool.verb,
            "editable": list(described),
            "arguments": described,
            **({"schema": schema} if schema else {}),
        }
        self._open(
            call_id,
            {
                "kind": GateKind.CONFIRM,
                "subject": subject,
                "question": f"Confirm before {tool.verb}: {tool.name} ({call_id})",
                "details": confirm.description,
                "form": forms.confirmation_spec(call),
                "initial": forms.confirmation_initial(call),
                "call": call,
            },
            role=confirm.role,
            quorum=confirm.quorum,
            timeout=confirm.timeout,
            on_timeout=confirm.on_timeout,
            escalate_to=confirm.escalate_to,
        )

    def _apply(
        self, call_id: str, tool: Tool, gate: Gate, args: dict[str, Any]
    ) -> tuple[dict[str, Any], KeyParts | None] | Returned:
        answer = gate.answer or {}
        if answer.get("decision") != forms.APPROVE:
            if tool.confirmation.on_reject == OnReject.RETURN:
                return Returned(self._reviews[call_id].as_result())
            reason = answer.get("reason") or "no reason given"
            raise CallRejected(
                f"{tool.name} ({call_id}) was rejected by {gate.answered_by}: {reason}",
                reason=reason,
                by=gate.answered_by,
            )
        edited = answer.get("args") or args
        if gate.attempts:
            return edited, _asked_again(tool.key(self.ctx, edited), gate, edited, args)
        if canonical_json(edited) == canonical_json(args):
            # Approved as asked (an untouched edit field is the value asked for): the request
            # the stage asked about, under its own key.
            return args, None
        parts = tool.key(self.ctx, edited)
        # An edited request is a new revision of the delivery: its own key, so it can never
        # be taken for the request the stage asked about (or reuse that one's outcome).
        return edited, replace(parts, revision=f"{parts.revision}+edit-{digest(edited)[:12]}")

    def _decided(self, gate_id: str, gate: Gate | None) -> GateAction:
        """The gate's decision, held against the approved plan: asking again a gate the plan
        said was answered is a departure from it (asking is not an outside act, so the run
        is not stopped for it; it is recorded). A recorded answer is handed to the hooks."""
        decision = decide(gate)
        planned = self.contract.gates.get(f"{self.stage}/{gate_id}") if self.contract else None
        if (
            decision.action == GateAction.ASK
            and planned == GateAction.USE_ANSWER
            and not self.state.deviated
        ):
            self.state.deviate(
                f"gate {self.stage}/{gate_id}: the plan said its answer was recorded, the engine "
                "found none and asked again"
            )
        if decision.action == GateAction.USE_ANSWER:
            self._reviews[gate_id] = _review_of(gate)
            self.hooks.after_answer(self.ctx, gate_id, dict(gate.answer or {}))
        return decision.action

    def _open(
        self,
        gate_id: str,
        fields: dict[str, Any],
        *,
        role: str,
        quorum: int,
        timeout: timedelta | None,
        on_timeout: OnTimeout | None,
        escalate_to: str,
    ) -> None:
        if role not in GateRole.values or (escalate_to and escalate_to not in GateRole.values):
            raise ValueError(f"a gate's role is one of {', '.join(GateRole.values)}")
        if quorum < 1:
            raise ValueError("a gate's quorum is at least 1")
        self.hooks.before_ask(self.ctx, gate_id)
        gate_rows.open_gate(
            self.writer,
            self.run,
            self.stage,
            {
                "gate_id": gate_id,
                **fields,
                "role": role,
                "quorum": quorum,
                "on_timeout": on_timeout.to_dict() if on_timeout else {},
                "escalate_to": escalate_to,
                "timeout": timeout.total_seconds() if timeout else None,
                "shape": shape(
                    self.pipeline.name, self.stage, gate_id, fields["kind"], fields["call"]
                ),
            },
            usage=self.usage.to_dict(),
        )
        raise StageWaiting(f"waiting for a human at {self.stage}/{gate_id}")


def _asked_again(
    parts: KeyParts, gate: Gate, edited: dict[str, Any], args: dict[str, Any]
) -> KeyParts:
    """The key of a call confirmed again after its target refused an earlier answer's call
    (runs/gates/reopen.py): a revision of its own for this attempt, distinct from every
    refused attempt's even when the arguments are the same, so the request is never taken
    for a refused one (nor its refusal reused)."""
    revision = f"{parts.revision}+ask-{len(gate.attempts) + 1}"
    if canonical_json(edited) != canonical_json(args):
        revision += f"+edit-{digest(edited)[:12]}"
    return replace(parts, revision=revision)


def _check_timeout(
    spec: list[dict[str, Any]],
    shown: dict[str, Any],
    form_class: str,
    timeout: timedelta | None,
    on_timeout: OnTimeout | None,
) -> None:
    """A default answer must be one the form accepts: the time-out records it as an answer."""
    if on_timeout is not None and timeout is None:
        raise ValueError("on_timeout needs a timeout")
    if on_timeout is not None and on_timeout.answer is not None:
        form = forms.build(spec, shown, data=on_timeout.answer, form_class=form_class)
        if not form.is_valid():
            raise ValueError(
                f"on_timeout's answer does not fit the form: {forms.errors_said(form)}"
            )


def _check_text(question: str, details: str) -> None:
    if len(question) > MAX_QUESTION:
        raise ValueError(
            f"a gate's question is a heading of at most {MAX_QUESTION} characters "
            f"(this one has {len(question)}): put long text in details="
        )
    if len(details) > MAX_DETAILS:
        raise ValueError(f"a gate's details are at most {MAX_DETAILS} characters")


def _review_of(gate: Gate) -> Review:
    answer = gate.answer or {}
    return Review(
        decision=str(answer.get("decision", "")),
        by=gate.answered_by,
        at=gate.answered_at,
        reason=str(answer.get("reason") or answer.get("notes") or ""),
        edits={name: list(pair) for name, pair in (gate.diff or {}).items()},
    )

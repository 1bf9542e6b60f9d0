"""The durable tool call: how StageContext.call reaches the outside world.

    decide (replay.decide_on on what the ledger holds, the target asked where the decision
    needs it) → hold the decision against the approved plan → act on it:
        reuse / skip / record-found: return without a call
        call / retry-same-key: the effect's intent is written (claiming its delivery key),
        then the call is made, fenced by the lease, then its outcome (external id) written.

A call whose outcome is not known is recorded as unknown, never guessed about. SAFE calls are
recorded too, with no effect row; a stage run again in the same run replays their results and
checks every call it made before for divergence (reentry.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction

from runs import tracing
from runs.events import Failed, NeedsApproval, ToolCalled, ToolResult
from runs.execution.reentry import Reentry
from runs.execution.stage_state import StagePart, StageState, StageStopped
from runs.ledger import effects, leases, payload_summary
from runs.ledger.append import LeaseLost, LedgerError, RunMove, append, deferred_commit
from runs.ledger.canonical import as_recorded
from runs.ledger.effects import (
    Intent,
    MorePayload,
    claim_intent,
    record_found,
    record_intent,
    record_outcome,
    with_more,
)
from runs.ledger.exchanges import exchanges_payload, recording
from runs.models import Effect, ReplayPolicy, Run
from runs.pipeline import KeyConflict, KeyParts, Tool, ToolRejected, timed_out
from runs.planning.replay import Action, Decision, decide, decide_on, first_action
from runs.planning.replay_log import request_hash


@dataclass(frozen=True, slots=True)
class Returned:
    """What a call returns when the decision was not to make it (a reuse, a skip, a result
    the target was found to hold)."""

    value: Any


# The gates' answer before a call (asking.py): its arguments and an edited request's key
# parts, or a rejection handed back as the call's result.
Confirmed = Callable[[str, Tool, dict[str, Any]], tuple[dict[str, Any], KeyParts | None] | Returned]


class DurableCalls(StagePart):
    """The tool calls of a stage (its StageContext holds them): every call goes through the
    effect ledger, under the run's lease, held against the approved plan if one binds the
    work."""

    def __init__(self, state: StageState, confirmed: Confirmed, reentry: Reentry) -> None:
        super().__init__(state)
        # The gates' answer before a call that needs a human's confirmation (asking.py).
        self._confirmed = confirmed
        # What an earlier attempt of this stage in this run recorded (reentry.py).
        self._reentry = reentry

    def call(self, call_id: str, tool_name: str, args: dict[str, Any]) -> Any:
        if tool_name not in self.spec.tools:
            raise LedgerError(f"stage {self.stage} may not call tool {tool_name!r}")
        tool = self.pipeline.tool(tool_name)
        tool.check_args(args)
        with tracing.tool_call(self, call_id, tool):  # a span when tracing is on
            if tool.policy == ReplayPolicy.SAFE:
                return self._call_safe(call_id, tool, args)
            return self._call_effect(call_id, tool, args)

    # SAFE calls ---------------------------------------------------------------------------

    def _call_safe(self, call_id: str, tool: Tool, args: dict[str, Any]) -> Any:
        before = self._reentry.first_use(call_id, tool, "", args)
        # A diverged request (recorded by first_use) is made with what it asks now.
        replaying = before is not None and before.replays(request_hash(tool.name, args))
        action = decide(tool=tool.name, call_id=call_id, policy=tool.policy, recorded=None, made=replaying).action  # fmt: skip
        self._keep_contract(call_id, tool, action, args)
        if replaying:
            # The facts the stage had, and the reviewer saw: never fetched again in this run.
            append(self.writer, self._result(call_id, tool, replayed=True), flush=False, wait=False)
            return as_recorded(before.result)
        # Neither of a SAFE call's events waits for the disk (append's flush), nor for the
        # server's answer (its wait): lost in a database crash, or refused with the lease,
        # the call is simply made again, which is what SAFE means.
        append(
            self.writer,
            ToolCalled(
                stage=self.stage, call=call_id, tool=tool.name, policy=tool.policy, args=args
            ),
            flush=False,
            wait=False,
        )
        self.hooks.before_call(self.ctx, call_id)
        started = time.monotonic()
        price = tool.price_of(args)
        self.usage.add_call(tool.name, price)
        with recording() as seen:
            result = tool.call(args, "")
        self.hooks.after_call(self.ctx, call_id, result)
        made = self._result(call_id, tool, result=result, cost=str(price), duration_ms=_ms(started))
        more = self._exchanges(seen, call_id)
        # A transaction only when an HTTP tool's exchanges may write artifact rows beside the
        # event: alone, the append is one write (one round trip on PostgreSQL). Either way it
        # does not wait for the disk.
        with deferred_commit() if more is not None else nullcontext():
            append(self.writer, with_more(made, more), flush=False, wait=False)
        return as_recorded(result)

    # Calls with an effect -----------------------------------------------------------------

    def _call_effect(self, call_id: str, tool: Tool, args: dict[str, Any]) -> Any:
        edited = None
        if tool.confirmation is not None:
            # Before anything is decided or written: a first call that needs a human stops
            # the run here, with nothing done (asking.py).
            confirmed = self._confirmed(call_id, tool, args)
            if isinstance(confirmed, Returned):
                return confirmed.value  # a rejection handed back as the result (on_reject)
            args, edited = confirmed
        parts = edited or tool.key(self.ctx, args)
        key = parts.key
        self._reentry.first_use(call_id, tool, key, args)
        tracing.note(key=key, action=Action.CALL)  # a decision below says otherwise
        req_hash = request_hash(tool.name, args)
        fields = {
            "delivery_key": key,
            "run": self.run,
            "stage": self.stage,
            "call_id": call_id,
            "tool": tool.name,
            "policy": tool.policy,
            "target": parts.target,
            "request_hash": req_hash,
            "request": args,
        }
        intent = ToolCalled(
            stage=self.stage,
            idempotency_key=key,
            call=call_id,
            tool=tool.name,
            policy=tool.policy,
            target=parts.target,
            args=args,
        )
        effect = None
        if self.contract is None and first_action(tool) == Action.CALL:
            # No approved plan binds this work, and on a key nobody used the decision is to
            # call: the intent claims the key in its own write, and only a taken key is read
            # and decided on below (a retry, or a key another run used).
            effect = claim_intent(self.writer, fields, event=intent)
        if effect is None:
            effect = self._decide_and_intend(call_id, tool, req_hash, fields, intent)
            if isinstance(effect, Returned):
                return effect.value  # decided without a call: the recorded or found result
        return self._make_call(call_id, tool, key, effect, args)

    def _decide(
        self, call_id: str, tool: Tool, existing: Effect | None, req_hash: str
    ) -> tuple[Decision, Any, list]:
        """The one decision the planner predicted with, on what the ledger holds; the target
        is asked where the decision needs it, and that question is counted and recorded."""
        asked: list = []

        def ask(effect: Effect) -> Any:
            self.usage.add_query(tool.name)
            with recording() as seen:
                try:
                    return tool.reconcile(effect)
                finally:
                    asked.extend(seen)

        decision, answer = decide_on(tool, call_id, existing, request_hash=req_hash, ask=ask)
        return decision, answer, asked

    def _decide_and_intend(
        self,
        call_id: str,
        tool: Tool,
        req_hash: str,
        fields: dict[str, Any],
        intent: ToolCalled,
    ) -> Effect | Returned:
        """Read the effect the key has, decide (held against the approved plan) and act: the
        effect whose intent is now recorded when the decision calls, else what the call
        returns without being made."""
        key = fields["delivery_key"]
        existing = effects.find(key)
        decision, answer, asked = self._decide(call_id, tool, existing, req_hash)
        self._keep_contract(call_id, tool, decision.action, fields["request"])
        if decision.action == Action.REFUSE:
            self._stop(Run.Status.FAILED, Failed, decision.reason, key=key)
        if decision.action == Action.BLOCKED:
            self._stop(
                Run.Status.NEEDS_APPROVAL,
                NeedsApproval,
                decision.reason,
                key=key,
                more_payload=self._exchanges(asked, f"{call_id}/reconcile", "reconcile"),
            )
        if decision.action == Action.REUSE:
            return self._reuse(call_id, tool, existing)
        if decision.action == Action.SKIP:
            return self._skip(call_id, tool, key)
        if decision.action == Action.RECORD_FOUND:
            record_found(
                self.writer, existing, answer, more_payload=self._exchanges(asked, call_id)
            )
            return Returned(as_recorded(answer.result))
        # CALL or RETRY_SAME_KEY: intent first, then the call.
        return record_intent(
            self.writer,
            fields,
            event=intent,
            # What the target answered when it was asked first ("not found"), if it was.
            more_payload=self._exchanges(asked, f"{call_id}/reconcile", "reconcile"),
        )

    def _reuse(self, call_id: str, tool: Tool, existing: Effect) -> Returned:
        # What the ledger already holds, written down again: lost in a database crash, a
        # later resume re-uses the same confirmed effect (no flush needed).
        append(
            self.writer,
            self._result(
                call_id,
                tool,
                idempotency_key=existing.delivery_key,
                reused=True,
                external_id=existing.external_id,
                cost="0",
            ),
            flush=False,
            wait=False,
        )
        if existing.result is None:
            # A supervisor confirmed it by hand (edits.edit_effect): the external id is all
            # that is known, and the stage must still see it, not "no result".
            return Returned({"external_id": existing.external_id})
        return Returned(as_recorded(existing.result))

    def _skip(self, call_id: str, tool: Tool, key: str) -> Returned:
        append(
            self.writer,
            self._result(
                call_id,
                tool,
                idempotency_key=key,
                skipped=True,
                reason="a supervisor abandoned this effect",
            ),
        )
        return Returned(None)

    def _make_call(
        self, call_id: str, tool: Tool, key: str, effect: Effect | Intent, args: dict[str, Any]
    ) -> Any:
        """Make the call whose intent is recorded, fenced by the lease, and record its outcome."""
        self.hooks.before_call(self.ctx, call_id)
        # Fence the call itself, not only the writes around it: a worker that froze after
        # its intent (GC pause, suspended VM, SIGSTOP) and wakes after a takeover would
        # otherwise make the call the resumed run already made (a second card charge) and
        # only then be refused at the write. A takeover needs the lease expired, and the
        # held lease knows, from its last fenced acquire or renewal, until when it cannot
        # be (leases.HeldLease): no read. The window left is this check to the call.
        self._fence_call()
        started = time.monotonic()
        # Priced by the arguments sent (edited ones, after a confirmation), not those asked.
        price = tool.price_of(args)
        self.usage.add_call(tool.name, price)
        seen: list = []
        try:
            with recording() as seen:
                result = tool.call(args, key)
            self.hooks.after_call(self.ctx, call_id, result)
        except Exception as exc:
            self._record_failure(call_id, tool, effect, exc, seen)
            raise
        # The outcome does not wait for the disk, nor do an HTTP tool's exchanges with it: its
        # intent did, before the call. Lost in a database crash, the effect is back to intent,
        # in doubt, as when a worker dies right after a call, and the resume's plan reconciles
        # it or retries it under its key; the next flushed write (an intent, the checkpoint)
        # takes it to the disk anyway. Nor does it wait for the server's answer (append's
        # wait): a refusal (the lease lost) is met at the next append, before the next call.
        cost, tokens = self._metered(tool, price, result)
        external_id = str(result["external_id"])
        record_outcome(
            self.writer,
            effect,
            self._result(
                call_id,
                tool,
                idempotency_key=key,
                status=Effect.Status.CONFIRMED,
                external_id=external_id,
                cost=str(cost),
                usage=tokens,
                # A metered tool's result names the model billed (runs/tools/model.py).
                model=str(result.get("model") or "") if tool.metered else "",
                duration_ms=_ms(started),
                result=payload_summary.cut_strings(result),
            ),
            status=Effect.Status.CONFIRMED,
            external_id=external_id,
            result=result,
            cost=cost,
            more_payload=self._exchanges(seen, call_id),
            flush=False,
            wait=False,
        )
        return as_recorded(result)

    def _metered(self, tool: Tool, price: Decimal, result: dict) -> tuple[Decimal, dict[str, int]]:
        """What a confirmed call cost, and the tokens it used: a tool billed by what it
        consumed (a model) says so in its answer, added to the stage's usage here."""
        if tool.metered is None:
            return price, {}
        money, tokens = tool.metered(result)
        self.usage.add_metered(money, tokens)
        return price + money, tokens

    def _record_failure(
        self, call_id: str, tool: Tool, effect: Effect | Intent, exc: Exception, seen: list
    ) -> None:
        """Record what a call that raised tells: a key conflict (nothing happened, and the
        same key would get the same 409: the run stops, and a resume of it waits for a
        human), a refusal (nothing happened: the stage fails), or else an outcome nobody can
        tell — unknown, never guessed. Raises StageStopped where the run has stopped."""
        more = self._exchanges(seen, call_id)
        if isinstance(exc, ToolRejected) and not isinstance(exc, KeyConflict):
            refused = self._result(
                call_id,
                tool,
                idempotency_key=effect.delivery_key,
                status=Effect.Status.FAILED,
                external_id="",
                error=str(exc),
            )
            record_outcome(
                self.writer,
                effect,
                refused,
                status=Effect.Status.FAILED,
                error=str(exc),
                more_payload=more,
            )
            return  # the caller raises it on: the stage fails
        if isinstance(exc, KeyConflict):
            status, error = Effect.Status.CONFLICT, str(exc)[:2000]
            said, late = error, False
        else:
            status, error = Effect.Status.UNKNOWN, f"{type(exc).__name__}: {exc}"[:2000]
            said = f"outcome unknown: {type(exc).__name__}: {exc}"[:2000]
            late = timed_out(exc)  # a field: the inbox never reads "timed out" off the words
        tracing.note(outcome=status)
        failed = Failed(
            stage=effect.stage,
            idempotency_key=effect.delivery_key,
            call=call_id,
            tool=tool.name,
            status=status,
            error=said,
            timed_out=late,
        )
        record_outcome(
            self.writer,
            effect,
            failed,
            status=status,
            error=error,
            move=RunMove(Run.Status.FAILED),
            more_payload=more,
        )
        raise StageStopped(str(exc)) from exc

    def _result(self, call_id: str, tool: Tool, **fields: Any) -> ToolResult:
        """The call's TOOL_RESULT, saying what it came to in `fields`."""
        return ToolResult(stage=self.stage, call=call_id, tool=tool.name, **fields)

    def _fence_call(self) -> None:
        if self.held is not None:
            self.held.check()
        elif not leases.holds(self.writer.run_id, self.writer.token):
            # A context built without a held lease (a test driving a stage by hand) reads it.
            raise LeaseLost(self.writer.run_id, self.writer.token)

    def _exchanges(self, seen: list, call_id: str, field: str = "exchanges") -> MorePayload:
        """The requests and responses an HTTP tool made, as more payload for its call's event
        (None for other tools): built inside the event's transaction, since large bodies
        become artifact rows that must commit with the fenced append or not at all."""
        if not seen:
            return None
        name = f"http/{self.run.public_id}/{self.stage}/{call_id}"
        return lambda: {field: exchanges_payload(seen, name=name, run=self.run)}

    # The approved plan ------------------------------------------------------------------

    def _keep_contract(self, call_id: str, tool: Tool, action: str, args: dict) -> None:
        """Hold the decision about to be acted on against the approved plan's line. The first
        difference is recorded (PLAN_DEVIATED); a call the plan did not promise on a tool that
        must never be guessed about (replay.GUARDED_POLICIES) is not made: the run stops for
        a human before it. A call that continues a stage made as it goes is counted apart."""
        tracing.note(action=action)
        if self.contract is None:
            return
        confirmed = tool.confirmation is not None
        if self.contract.continues(self.stage, call_id, tool.policy, action, confirmed):
            self.usage.add_beyond(tool.name, tool.price_of(args))
            return
        difference = self.contract.difference(self.stage, call_id, tool.name, tool.policy, action)
        if difference is None:
            return
        if not self.state.deviated:
            self.state.deviate(difference.describe(), difference=difference.to_dict())
        if difference.stop_before:
            self._stop(
                Run.Status.NEEDS_APPROVAL,
                NeedsApproval,
                f"{difference.describe()}; the approved plan did not promise this call, so it "
                "was not made: read the fresh plan and approve again",
            )

    def _stop(
        self,
        status: str,
        stopping: type[Failed | NeedsApproval],
        reason: str,
        *,
        key: str = "",
        more_payload: MorePayload = None,
    ) -> None:
        event = stopping(stage=self.stage, idempotency_key=key, error=reason)
        with transaction.atomic():
            append(self.writer, with_more(event, more_payload), move=RunMove(status))
        raise StageStopped(reason)


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)

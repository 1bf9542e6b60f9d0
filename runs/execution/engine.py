"""Stage execution: what a worker does with one stage job.

    acquire the lease (new fencing token) → consume the run's ticket and append STARTED →
    run the stage function; every tool call goes through StageContext.call (effect intent
    before, external id after) → verify the output's rules → VERIFIED + checkpoint (or FAILED)
    → queue the next stage → release the lease.

A heartbeat thread renews the lease while the stage runs. Every write checks the token, so a
worker that lost its lease stops at its next write having written nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.db import connection, transaction
from django.db.models.functions import Now

from runs.execution.hooks import CallHooks
from runs.ledger import artifacts, effects, leases
from runs.ledger.append import LeaseLost, LedgerError, Writer, append, create_run
from runs.ledger.chain import canonical_json
from runs.ledger.checkpoints import latest_checkpoint, write_checkpoint
from runs.ledger.effects import (
    Intent,
    MorePayload,
    claim_intent,
    record_found,
    record_intent,
    record_outcome,
    with_more,
)
from runs.models import Checkpoint, Effect, Event, ReplayPolicy, Run
from runs.pipeline import (
    Pipeline,
    StageOutput,
    ToolRejected,
    registry,
)
from runs.planning import contract
from runs.planning.contract import Contract, Usage
from runs.planning.replay import Action, Recorded, asks_target, decide
from runs.tools.http import KeyConflict, exchanges_payload, recording

log = logging.getLogger("runs.engine")


class Outcome(StrEnum):
    """What engine.execute() did with one stage job (the RQ job's result)."""

    # Another worker holds the run's lease; this job did nothing.
    BUSY = "busy"
    # The ticket was consumed already, or the run is not active: a duplicate or stale job.
    NOTHING_TO_DO = "nothing-to-do"
    # The run stopped for a human or with an unknown outcome (its event says why).
    STOPPED = "stopped"
    # The lease was taken over mid-stage; this worker wrote nothing after that.
    LEASE_LOST = "lease-lost"
    # The stage function raised, or returned something else than a StageOutput.
    FAILED = "failed"
    # The output failed a rule: no checkpoint.
    VERIFICATION_FAILED = "verification-failed"
    # VERIFIED and the checkpoint are written; the next stage is queued.
    VERIFIED = "verified"


@dataclass(frozen=True, slots=True)
class Returned:
    """What a call returns when the decision was not to make it (a reuse, a skip, a result
    the target was found to hold)."""

    value: Any


class StageStopped(Exception):
    """The stage cannot go on; the run's new status and its event are already written."""


def worker_identity() -> str:
    return f"worker:{socket.gethostname()}:{os.getpid()}"


# --- Starting runs -------------------------------------------------------------------------


def start_run(
    pipeline_name: str,
    inputs: dict[str, str] | None = None,
    *,
    actor: str,
    enqueue: bool = True,
) -> Run:
    """Validate, create the run with its pinned inputs, and queue its first stage."""
    pipeline = registry.get(pipeline_name)
    pinned = pipeline.resolve_inputs(dict(inputs or {}))
    ticket = uuid.uuid4().hex
    with transaction.atomic():
        run = create_run(
            pipeline.name,
            inputs=pinned,
            actor=actor,
            first_stage=pipeline.stage_names[0],
            payload={"stages": list(pipeline.stage_names)},
            ticket=ticket,
        )
        if enqueue:
            transaction.on_commit(lambda: dispatch(run.pk, pipeline.stage_names[0], ticket))
    return run


def dispatch(run_pk: int, stage: str, ticket: str) -> bool:
    """Put the stage job on the queue. A Redis failure is logged, not raised: the ticket stays
    pending and the sweeper turns a job Redis never got into an interrupted run."""
    from runs import jobs

    try:
        jobs.enqueue_stage(run_pk, stage, ticket)
        return True
    except Exception as exc:  # redis.exceptions.ConnectionError and friends
        log.warning("could not queue run-%s/%s: %s", run_pk, stage, exc)
        return False


# --- Executing a stage ---------------------------------------------------------------------


class Heartbeat(threading.Thread):
    """Renews the lease every TTL/3 until stopped or the lease is lost; each renewal moves the
    held lease's deadline (leases.HeldLease), which fences the stage's external calls."""

    def __init__(self, held: leases.HeldLease) -> None:
        super().__init__(daemon=True, name=f"heartbeat-run-{held.run_id}")
        self.held = held
        self._stop_event = threading.Event()

    def run(self) -> None:
        interval = max(self.held.ttl / 3, 0.05)
        try:
            while not self._stop_event.wait(interval):
                try:
                    leases.renew_held(self.held)
                except LeaseLost:
                    return
                except Exception as exc:  # database hiccup: try again next beat
                    log.warning("heartbeat for run-%s failed: %s", self.held.run_id, exc)
                    connection.close()
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


def execute(
    run_pk: int,
    stage_name: str,
    ticket: str,
    *,
    holder: str | None = None,
    hooks: CallHooks | None = None,
) -> Outcome:
    """Run one stage of one run, calling `hooks` around each tool call (none by default)."""
    holder = holder or worker_identity()
    try:
        held = _acquire_for_ticket(run_pk, ticket, holder)
    except leases.LeaseBusy:
        log.info(
            "run-%s is leased by another worker; job %s/%s skipped",
            run_pk,
            stage_name,
            ticket,
        )
        return Outcome.BUSY
    writer = Writer(run_pk, held.token, holder)
    heartbeat = Heartbeat(held)
    try:
        run = _begin(writer, stage_name, ticket)
        if run is None:
            return Outcome.NOTHING_TO_DO
        heartbeat.start()
        return _run_stage(writer, held, run, stage_name, hooks or CallHooks())
    except StageStopped as exc:
        log.info("run-%s stopped in %s: %s", run_pk, stage_name, exc)
        return Outcome.STOPPED
    except LeaseLost as exc:
        log.warning("%s", exc)
        return Outcome.LEASE_LOST
    finally:
        if heartbeat.is_alive():
            heartbeat.stop()
        leases.release(run_pk, held.token)


def _ticket_pending(run_pk: int, ticket: str) -> bool:
    return bool(ticket) and Run.objects.filter(pk=run_pk, ticket=ticket).exists()


def _acquire_for_ticket(run_pk: int, ticket: str, holder: str) -> leases.HeldLease:
    """Take the lease for the job that owns the run's pending ticket.

    While a ticket is pending no stage is executing, so whoever holds the lease holds it for
    a moment: the previous stage's worker between its commit (which queued this job) and its
    release, a duplicate delivery finding nothing to do, a sweeper or a supervisor's edit. A
    job that gave up at once would be dropped with its ticket still pending, and the sweeper
    would later interrupt a healthy run; so the owner waits, at most one lease TTL (by then
    a holder that froze has expired). A job whose ticket is not pending (a duplicate, or a
    stage already taken) gives up at once: it has nothing to do anyway."""
    deadline = time.monotonic() + leases.ttl_seconds() + 1
    while True:
        try:
            return leases.hold(run_pk, holder)
        except leases.LeaseBusy:
            if time.monotonic() > deadline or not _ticket_pending(run_pk, ticket):
                raise
        time.sleep(min(0.1, leases.ttl_seconds() / 20))


def _begin(writer: Writer, stage_name: str, ticket: str) -> Run | None:
    """Consume the ticket and append STARTED, or find that this job has nothing to do (a
    duplicate delivery, a stage already done, a run an operator has not resumed)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=writer.run_id)
        if (
            not ticket
            or run.ticket != ticket
            or run.current_stage != stage_name
            or not run.is_active
        ):
            return None
        pipeline = registry.get(run.pipeline)
        stage = pipeline.stage(stage_name)
        append(
            writer,
            Event.Type.STARTED,
            stage=stage_name,
            inputs={name: run.inputs.get(name) for name in stage.consumes},
            payload={
                "worker": writer.actor,
                "token": writer.token,
                "attempt": run.attempt,
            },
            status=Run.Status.RUNNING,
            ticket="",
            queued_at=None,
        )
    run.refresh_from_db()
    return run


def _run_stage(
    writer: Writer, held: leases.HeldLease, run: Run, stage_name: str, hooks: CallHooks
) -> Outcome:
    pipeline = registry.get(run.pipeline)
    stage = pipeline.stage(stage_name)
    bound, deviated = contract.active(run)
    ctx = StageContext(
        writer, run, pipeline, stage_name, hooks, held=held, contract=bound, deviated=deviated
    )
    try:
        output = stage.run(ctx)
        if not isinstance(output, StageOutput):
            raise TypeError(f"stage {stage_name} returned {type(output).__name__}, not StageOutput")
    except (LeaseLost, StageStopped):
        raise  # the run's status and its event are written already, or cannot be
    except Exception as exc:
        append(
            writer,
            Event.Type.FAILED,
            stage=stage_name,
            payload={"error": f"{type(exc).__name__}: {exc}"[:2000]},
            status=Run.Status.FAILED,
        )
        return Outcome.FAILED

    results = [rule.evaluate(output) for rule in stage.rules]
    failed = [r for r in results if not r["passed"]]
    if failed:
        append(
            writer,
            Event.Type.FAILED,
            stage=stage_name,
            payload={"error": "verification failed", "rules": results},
            status=Run.Status.FAILED,
        )
        return Outcome.VERIFICATION_FAILED

    next_stage = pipeline.next_stage(stage_name)
    ticket = uuid.uuid4().hex if next_stage else ""
    # Artifact rows are written in the checkpoint's transaction, so a worker that lost its
    # lease leaves none behind (only content-addressed blobs, which nothing references).
    with transaction.atomic():
        stored = [
            artifacts.store(f"{stage_name}/{run.public_id}/{name}", data, content_type, run=run)
            for name, (data, content_type) in output.artifacts.items()
        ]
        manifest = {
            "inputs": {name: run.inputs.get(name) for name in stage.consumes},
            "pinned": dict(run.inputs),
            "artifacts": [
                {
                    "name": name,
                    "uri": a.uri,
                    "sha256": a.sha256,
                    "size": a.size,
                    "content_type": a.content_type,
                }
                for name, a in zip(output.artifacts, stored, strict=True)
            ],
            "rules": results,
            "outputs": output.outputs,
        }
        write_checkpoint(
            writer,
            run,
            stage=stage_name,
            next_stage=next_stage,
            manifest=manifest,
            usage=ctx.usage.to_dict(),
            status=Run.Status.RUNNING,
            current_stage=next_stage or stage_name,
            ticket=ticket,
            queued_at=Now() if next_stage else None,
        )
        if next_stage:
            transaction.on_commit(lambda: dispatch(run.pk, next_stage, ticket))
        else:
            if ctx.contract is not None and not ctx.deviated:
                _verdict(ctx)
            append(writer, Event.Type.SUCCEEDED, payload={}, status=Run.Status.SUCCEEDED)
    return Outcome.VERIFIED


def _verdict(ctx: StageContext) -> None:
    """The end of resumed work that kept to its plan call by call: what it used, summed over
    its verified stages, must also be what the plan priced."""
    used = contract.used_since(ctx.run, ctx.contract)
    shortfall = ctx.contract.shortfall(used)
    if shortfall:
        ctx.deviate(shortfall)
        return
    append(ctx.writer, Event.Type.PLAN_KEPT, payload=ctx.contract.verdict_payload(used))


# --- The context a stage function sees -----------------------------------------------------


def request_hash(tool: str, args: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json({"tool": tool, "args": args}).encode()).hexdigest()


class StageContext:
    """What a stage function may do: read its pinned inputs and upstream outputs, and call
    tools through the effect ledger."""

    def __init__(
        self,
        writer: Writer,
        run: Run,
        pipeline: Pipeline,
        stage: str,
        hooks: CallHooks | None = None,
        *,
        held: leases.HeldLease | None = None,
        contract: Contract | None = None,
        deviated: bool = False,
    ) -> None:
        self.writer = writer
        # The lease as this worker knows it: fences each external call without a read.
        self.held = held
        self.run = run
        self.pipeline = pipeline
        self.stage = stage
        self.hooks = hooks or CallHooks()
        self._spec = pipeline.stage(stage)
        self.inputs = {name: run.inputs.get(name) for name in self._spec.consumes}
        # The approved plan this resumed work is bound by (None on a first execution), and
        # whether it was already departed from.
        self.contract = contract
        self.deviated = deviated
        # What this stage used: recorded in its VERIFIED event, summed against the plan.
        self.usage = Usage()

    @property
    def run_id(self) -> str:
        return self.run.public_id

    @property
    def root_id(self) -> str:
        return self.run.root.public_id

    # Upstream ------------------------------------------------------------------------------

    def upstream(self, stage: str) -> Checkpoint:
        checkpoint = latest_checkpoint(self.run, stage)
        if checkpoint is None:
            raise LookupError(f"{self.run.public_id} has no verified {stage} checkpoint")
        return checkpoint

    def upstream_artifact(self, stage: str, name: str) -> bytes:
        for entry in self.upstream(stage).artifacts:
            if entry["name"] == name:
                data = artifacts.read(entry["uri"])
                if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                    raise artifacts.ArtifactMissing(
                        f"{entry['uri']} no longer matches its checkpoint"
                    )
                return data
        raise LookupError(f"the {stage} checkpoint has no artifact {name!r}")

    # Tool calls ---------------------------------------------------------------------------

    def call(self, call_id: str, tool_name: str, **args: Any) -> Any:
        if tool_name not in self._spec.tools:
            raise LedgerError(f"stage {self.stage} may not call tool {tool_name!r}")
        tool = self.pipeline.tool(tool_name)
        if tool.policy == ReplayPolicy.SAFE:
            return self._call_safe(call_id, tool, args)
        return self._call_effect(call_id, tool, args)

    def _call_safe(self, call_id: str, tool, args: dict[str, Any]) -> Any:
        self._keep_contract(call_id, tool, Action.RERUN)
        # Neither of a SAFE call's events waits for the disk (append's flush): lost in a
        # database crash, the call is simply made again, which is what SAFE means.
        append(
            self.writer,
            Event.Type.TOOL_CALLED,
            stage=self.stage,
            payload={
                "call": call_id,
                "tool": tool.name,
                "policy": tool.policy,
                "args": args,
            },
            flush=False,
        )
        self.hooks.before_call(self, call_id)
        started = time.monotonic()
        self.usage.add_call(tool.name, tool.cost)
        with recording() as seen:
            result = tool.call(args, "")
        self.hooks.after_call(self, call_id, result)
        payload = {
            "call": call_id,
            "tool": tool.name,
            "result": result,
            "cost": str(tool.cost),
            "duration_ms": _ms(started),
        }
        more = self._exchanges(seen, call_id)
        # A transaction only when an HTTP tool's exchanges may write artifact rows beside the
        # event: alone, the append is one write (one round trip on PostgreSQL).
        with transaction.atomic() if more is not None else nullcontext():
            append(
                self.writer,
                Event.Type.TOOL_RESULT,
                stage=self.stage,
                payload=with_more(payload, more),
                flush=False,
            )
        return result

    def _decide(self, call_id: str, tool, existing: Effect | None, req_hash: str):
        """replay.decide() on what the ledger holds, asking the target only where the
        decision needs it: the one decision the planner predicted with."""
        recorded = Recorded.of(existing)
        answer, unanswered = None, ""
        asked: list = []
        if asks_target(tool.policy, recorded):
            self.usage.add_query(tool.name)
            try:
                with recording() as asked:
                    answer = tool.reconcile(existing)
            except Exception as exc:  # a target that cannot answer is never guessed about
                unanswered = str(exc) or type(exc).__name__
        decision = decide(
            tool=tool.name,
            call_id=call_id,
            policy=tool.policy,
            recorded=recorded,
            request_hash=req_hash,
            answer=answer,
            unanswered=unanswered,
            verb=tool.verb,
            target=existing.target if existing else "",
        )
        return decision, answer, asked

    def _call_effect(self, call_id: str, tool, args: dict[str, Any]) -> Any:
        parts = tool.key(self, args)
        key = parts.key
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
        intent_payload = {
            "call": call_id,
            "tool": tool.name,
            "policy": tool.policy,
            "target": parts.target,
            "args": args,
        }
        effect = None
        if self.contract is None and self._first_decision(call_id, tool) == Action.CALL:
            # No approved plan binds this work, and on a key nobody used the decision is to
            # call: the intent claims the key in its own write, and only a taken key is read
            # and decided on below (a retry, or a key another run used).
            effect = claim_intent(self.writer, fields, event_payload=intent_payload)
        if effect is None:
            effect = self._decide_and_intend(call_id, tool, key, req_hash, fields, intent_payload)
            if isinstance(effect, Returned):
                return effect.value  # decided without a call: the recorded or found result
        return self._make_call(call_id, tool, key, effect, args)

    def _first_decision(self, call_id: str, tool) -> Action:
        return decide(tool=tool.name, call_id=call_id, policy=tool.policy, recorded=None).action

    def _decide_and_intend(
        self,
        call_id: str,
        tool,
        key: str,
        req_hash: str,
        fields: dict[str, Any],
        intent_payload: dict[str, Any],
    ) -> Effect | Returned:
        """Read the effect the key has, decide (replay.decide, held against the approved plan)
        and act: the effect whose intent is now recorded when the decision calls, else what
        the call returns without being made."""
        existing = effects.find(key)
        decision, answer, asked = self._decide(call_id, tool, existing, req_hash)
        self._keep_contract(call_id, tool, decision.action)
        if decision.action == Action.REFUSE:
            self._stop(Run.Status.FAILED, Event.Type.FAILED, decision.reason, key=key)
        if decision.action == Action.BLOCKED:
            self._stop(
                Run.Status.NEEDS_APPROVAL,
                Event.Type.NEEDS_APPROVAL,
                decision.reason,
                key=key,
                more_payload=self._exchanges(asked, f"{call_id}/reconcile", "reconcile"),
            )
        if decision.action == Action.REUSE:
            # What the ledger already holds, written down again: lost in a database crash, a
            # later resume re-uses the same confirmed effect (no flush needed).
            append(
                self.writer,
                Event.Type.TOOL_RESULT,
                stage=self.stage,
                idempotency_key=key,
                payload={
                    "call": call_id,
                    "tool": tool.name,
                    "reused": True,
                    "external_id": existing.external_id,
                    "cost": "0",
                },
                flush=False,
            )
            if existing.result is None:
                # A supervisor confirmed it by hand (edits.edit_effect): the external id is
                # all that is known, and the stage must still see it, not "no result".
                return Returned({"external_id": existing.external_id})
            return Returned(existing.result)
        if decision.action == Action.SKIP:
            append(
                self.writer,
                Event.Type.TOOL_RESULT,
                stage=self.stage,
                idempotency_key=key,
                payload={
                    "call": call_id,
                    "tool": tool.name,
                    "skipped": True,
                    "reason": "a supervisor abandoned this effect",
                },
            )
            return Returned(None)
        if decision.action == Action.RECORD_FOUND:
            record_found(
                self.writer, existing, answer, more_payload=self._exchanges(asked, call_id)
            )
            return Returned(answer.result)
        # CALL or RETRY_SAME_KEY: intent first, then the call.
        return record_intent(
            self.writer,
            fields,
            event_payload=intent_payload,
            # What the target answered when it was asked first ("not found"), if it was.
            more_payload=self._exchanges(asked, f"{call_id}/reconcile", "reconcile"),
        )

    def _make_call(
        self, call_id: str, tool, key: str, effect: Effect | Intent, args: dict[str, Any]
    ) -> Any:
        """Make the call whose intent is recorded, fenced by the lease, and record its outcome."""
        self.hooks.before_call(self, call_id)
        # Fence the call itself, not only the writes around it: a worker that froze after
        # its intent (GC pause, suspended VM, SIGSTOP) and wakes after a takeover would
        # otherwise make the call the resumed run already made (a second card charge) and
        # only then be refused at the write. A takeover needs the lease expired, and the
        # held lease knows, from its last fenced acquire or renewal, until when it cannot
        # be (leases.HeldLease): no read. The window left is this check to the call.
        self._fence_call()
        started = time.monotonic()
        self.usage.add_call(tool.name, tool.cost)
        seen: list = []
        try:
            with recording() as seen:
                result = tool.call(args, key)
            self.hooks.after_call(self, call_id, result)
        except KeyConflict as exc:
            # Nothing happened for this request, and the same key would get the same 409: the
            # run stops, and replay.decide() blocks a resume of this effect for a human.
            record_outcome(
                self.writer,
                effect,
                status=Effect.Status.CONFLICT,
                error=str(exc)[:2000],
                event_type=Event.Type.FAILED,
                event_payload={
                    "call": call_id,
                    "tool": tool.name,
                    "status": "conflict",
                    "error": str(exc)[:2000],
                },
                run_status=Run.Status.FAILED,
                more_payload=self._exchanges(seen, call_id),
            )
            raise StageStopped(str(exc)) from exc
        except ToolRejected as exc:
            record_outcome(
                self.writer,
                effect,
                status=Effect.Status.FAILED,
                error=str(exc),
                more_payload=self._exchanges(seen, call_id),
            )
            raise
        except Exception as exc:
            # We cannot tell whether the call happened: say so, never guess.
            record_outcome(
                self.writer,
                effect,
                status=Effect.Status.UNKNOWN,
                error=f"{type(exc).__name__}: {exc}"[:2000],
                event_type=Event.Type.FAILED,
                event_payload={
                    "call": call_id,
                    "tool": tool.name,
                    "status": "unknown",
                    "error": f"outcome unknown: {type(exc).__name__}: {exc}"[:2000],
                },
                run_status=Run.Status.FAILED,
                more_payload=self._exchanges(seen, call_id),
            )
            raise StageStopped(str(exc)) from exc
        # The outcome does not wait for the disk: its intent did, before the call. Lost in a
        # database crash, the effect is back to intent, in doubt, as when a worker dies right
        # after a call, and the resume's plan reconciles it or retries it under its key; the
        # next flushed write (an intent, the checkpoint) takes it to the disk anyway.
        record_outcome(
            self.writer,
            effect,
            status=Effect.Status.CONFIRMED,
            external_id=str(result["external_id"]),
            result=result,
            cost=tool.cost,
            event_payload={
                "call": call_id,
                "tool": tool.name,
                "status": "confirmed",
                "external_id": str(result["external_id"]),
                "cost": str(tool.cost),
                "duration_ms": _ms(started),
                "result": _summary(result),
            },
            more_payload=self._exchanges(seen, call_id),
            flush=False,
        )
        return result

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

    def _keep_contract(self, call_id: str, tool, action: str) -> None:
        """Hold the decision about to be acted on against the approved plan's line. The first
        difference is recorded (PLAN_DEVIATED); a call the plan did not promise on a tool that
        must never be guessed about (RECONCILE_FIRST, NEVER) is not made: the run stops for a
        human before it."""
        if self.contract is None:
            return
        difference = self.contract.difference(self.stage, call_id, tool.name, tool.policy, action)
        if difference is None:
            return
        if not self.deviated:
            self.deviate(difference.describe(), difference=difference.to_dict())
        if difference.stop_before:
            self._stop(
                Run.Status.NEEDS_APPROVAL,
                Event.Type.NEEDS_APPROVAL,
                f"{difference.describe()}; the approved plan did not promise this call, so it "
                "was not made: read the fresh plan and approve again",
            )

    def deviate(self, reason: str, **details: Any) -> None:
        """Append PLAN_DEVIATED, once per approved plan, with what was used against it."""
        used = contract.used_since(self.run, self.contract)
        used.add(self.usage)
        append(
            self.writer,
            Event.Type.PLAN_DEVIATED,
            stage=self.stage,
            payload={
                **self.contract.verdict_payload(used),
                "reason": reason,
                **details,
            },
            deviated=True,
        )
        self.deviated = True

    def _stop(
        self,
        status: str,
        event_type: str,
        reason: str,
        *,
        key: str = "",
        more_payload: MorePayload = None,
    ) -> None:
        with transaction.atomic():
            append(
                self.writer,
                event_type,
                stage=self.stage,
                idempotency_key=key,
                payload=with_more({"error": reason}, more_payload),
                status=status,
            )
        raise StageStopped(reason)


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _summary(result: Any) -> Any:
    """Keep events small: long strings in a result are cut (the effect keeps the whole)."""
    if isinstance(result, dict):
        return {
            k: (v[:200] + "…" if isinstance(v, str) and len(v) > 200 else v)
            for k, v in result.items()
        }
    return result

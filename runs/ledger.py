"""The one append path of the run ledger.

Everything that moves a run's state goes through `append()` (or the helpers here that call it
inside the same transaction): it checks the writer's fencing token, assigns the next `seq`
under the run's row lock, chains the event's hash to its predecessor, and moves the run's
status. Effects and checkpoints are written in the same transaction as the event that tells
about them, so nothing is ever half-recorded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.db.models import F
from django.db.models.functions import Now

from runs import leases
from runs.leases import LeaseLost
from runs.models import Checkpoint, Effect, Event, Lease, Run

__all__ = [
    "LeaseLost",
    "LedgerError",
    "Writer",
    "append",
    "create_run",
    "verify_chain",
]

# Run fields the append path may set beside status; everything else about a run is fixed.
MOVABLE_RUN_FIELDS = frozenset({"current_stage", "ticket", "queued_at", "attempt"})


class LedgerError(ValueError):
    """A write the ledger refuses: unknown type or stage, illegal transition, bad payload."""


@dataclass(frozen=True)
class Writer:
    """Who writes, and under which fencing token."""

    run_id: int
    token: int
    actor: str


@dataclass
class ChainReport:
    run_id: int
    checked: int = 0
    ok: bool = True
    first_bad_seq: int | None = None
    problems: list[str] = field(default_factory=list)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def event_hash(prev_hash: str, content: dict[str, Any]) -> str:
    return hashlib.sha256((prev_hash + canonical_json(content)).encode()).hexdigest()


def _hashed_content(event: Event) -> dict[str, Any]:
    # created_at is set by the database clock and is not part of the chain; everything the
    # writer decided is.
    return {
        "run": event.run_id,
        "seq": event.seq,
        "stage": event.stage,
        "type": event.type,
        "inputs": event.inputs,
        "payload": event.payload,
        "payload_ref": event.payload_ref,
        "artifacts": event.artifacts,
        "idempotency_key": event.idempotency_key,
        "actor": event.actor,
        "token": event.token,
    }


def _stage_names(pipeline: str) -> tuple[str, ...]:
    from runs.pipeline import registry

    return registry.get(pipeline).stage_names


def _prepare_payload(run_id: int, seq: int, payload: dict[str, Any] | None) -> tuple[dict, str]:
    """Small payloads stay inline; large ones go to an artifact the event references."""
    payload = payload or {}
    encoded = canonical_json(payload).encode()
    if len(encoded) > settings.RESUMER_MAX_PAYLOAD_BYTES:
        raise LedgerError(
            f"payload of {len(encoded)} bytes exceeds the limit of "
            f"{settings.RESUMER_MAX_PAYLOAD_BYTES} bytes"
        )
    if len(encoded) <= settings.RESUMER_INLINE_PAYLOAD_BYTES:
        return payload, ""
    from runs import artifacts

    stored = artifacts.store(f"payload/run-{run_id}/{seq}", encoded, "application/json")
    return {"stored_as": stored.uri, "bytes": len(encoded)}, stored.uri


def append(
    writer: Writer,
    type: str,
    *,
    stage: str = "",
    payload: dict[str, Any] | None = None,
    artifacts: Sequence[str] = (),
    idempotency_key: str = "",
    inputs: dict[str, Any] | None = None,
    status: str | None = None,
    **run_fields: Any,
) -> Event:
    """Append one event to the writer's run, fenced by its lease; optionally move the run.

    Raises LeaseLost (nothing written) when the token is stale or expired, LedgerError for an
    unknown type or stage, an illegal status move or an oversized payload.
    """
    if type not in Event.Type.values:
        raise LedgerError(f"unknown event type {type!r}")
    if status is not None and status not in Run.Status.values:
        raise LedgerError(f"unknown run status {status!r}")
    unknown = set(run_fields) - MOVABLE_RUN_FIELDS
    if unknown:
        raise LedgerError(f"run fields {sorted(unknown)} are not set through events")
    with transaction.atomic():
        # The fencing check and the row lock are one statement: on PostgreSQL FOR UPDATE
        # serialises appends to this run; on SQLite the IMMEDIATE transaction already holds
        # the database's write lock.
        run = (
            Run.objects.select_for_update(of=("self",))
            .filter(pk=writer.run_id)
            .filter(leases.held_filter(writer.token))
            .only("pk", "pipeline", "status", "last_seq", "head_hash")
            .first()
        )
        if run is None:
            if not Run.objects.filter(pk=writer.run_id).exists():
                raise LedgerError(f"run-{writer.run_id} does not exist")
            raise LeaseLost(writer.run_id, writer.token)
        return _insert(
            run,
            writer.actor,
            writer.token,
            type,
            stage,
            payload,
            artifacts,
            idempotency_key,
            inputs,
            status,
            run_fields,
        )


def _insert(
    run: Run,
    actor: str,
    token: int | None,
    type: str,
    stage: str,
    payload: dict[str, Any] | None,
    artifact_uris: Sequence[str],
    idempotency_key: str,
    inputs: dict[str, Any] | None,
    status: str | None,
    run_fields: dict[str, Any],
) -> Event:
    if stage and stage not in _stage_names(run.pipeline):
        raise LedgerError(f"unknown stage {stage!r} for pipeline {run.pipeline!r}")
    if status is not None and status != run.status and run.status in Run.TERMINAL:
        raise LedgerError(f"{run.public_id} is {run.status}; its status no longer moves")
    seq = run.last_seq + 1
    body, payload_ref = _prepare_payload(run.pk, seq, payload)
    event = Event(
        run_id=run.pk,
        seq=seq,
        stage=stage,
        type=type,
        inputs=inputs or {},
        payload=body,
        payload_ref=payload_ref,
        artifacts=list(artifact_uris),
        idempotency_key=idempotency_key,
        actor=actor,
        token=token,
        prev_hash=run.head_hash,
    )
    event.hash = event_hash(run.head_hash, _hashed_content(event))
    event.save()
    changes: dict[str, Any] = {
        "last_seq": seq,
        "head_hash": event.hash,
        "version": F("version") + 1,
        "updated_at": Now(),
        **run_fields,
    }
    if status is not None:
        changes["status"] = status
        changes["attention"] = Run.attention_for(status)
    Run.objects.filter(pk=run.pk).update(**changes)
    return event


def create_run(
    pipeline: str,
    *,
    inputs: dict[str, Any],
    actor: str,
    first_stage: str,
    options: dict[str, Any] | None = None,
    parent: Run | None = None,
    branch_checkpoint: Checkpoint | None = None,
    payload: dict[str, Any] | None = None,
    ticket: str = "",
) -> Run:
    """Create a run, its lease row and its RUN_CREATED event (the only unfenced append:
    nobody can hold the lease of a run that does not exist yet)."""
    with transaction.atomic():
        run = Run.objects.create(
            pipeline=pipeline,
            inputs=inputs,
            options=options or {},
            current_stage=first_stage,
            parent=parent,
            branch_checkpoint=branch_checkpoint,
            status=Run.Status.PENDING,
            attention=Run.attention_for(Run.Status.PENDING),
            ticket=ticket,
            queued_at=Now() if ticket else None,
        )
        Lease.objects.create(run=run, token=0, holder="")
        _insert(
            run,
            actor,
            None,
            Event.Type.RUN_CREATED,
            "",
            payload or {},
            (),
            "",
            inputs,
            None,
            {},
        )
        run.refresh_from_db()
        return run


def verify_chain(run_id: int, *, batch: int = 2000) -> ChainReport:
    """Walk a run's events in seq order and recompute every hash. A gap, a broken link or a
    changed row (edited outside the application) is reported with its seq."""
    report = ChainReport(run_id=run_id)
    prev_hash, expected_seq = "", 1
    last_seq = 0
    while True:
        chunk = list(Event.objects.filter(run_id=run_id, seq__gt=last_seq).order_by("seq")[:batch])
        if not chunk:
            break
        for event in chunk:
            report.checked += 1
            problem = ""
            if event.seq != expected_seq:
                problem = f"seq {event.seq} follows {expected_seq - 1}: a gap"
            elif event.prev_hash != prev_hash:
                problem = f"seq {event.seq} does not link to its predecessor's hash"
            elif event_hash(prev_hash, _hashed_content(event)) != event.hash:
                problem = f"seq {event.seq} was altered: its content no longer matches its hash"
            if problem and report.ok:
                report.ok, report.first_bad_seq = False, event.seq
            if problem:
                report.problems.append(problem)
            prev_hash, expected_seq = event.hash, event.seq + 1
            last_seq = event.seq
    head = Run.objects.filter(pk=run_id).values("last_seq", "head_hash").first()
    if head and (head["last_seq"] != last_seq or head["head_hash"] != prev_hash):
        report.ok = False
        report.problems.append(
            f"run head says seq {head['last_seq']}, the log ends at seq {last_seq}"
        )
    return report


# --- Effects -------------------------------------------------------------------------------


def record_intent(writer: Writer, effect_fields: dict[str, Any], *, event_payload: dict) -> Effect:
    """Commit the effect intent (and its TOOL_CALLED event) before the external call.

    An existing effect with the same delivery key is reused: its attempts go up, and the
    caller decides from its status whether the call may happen at all."""
    with transaction.atomic():
        event = append(
            writer,
            Event.Type.TOOL_CALLED,
            stage=effect_fields["stage"],
            payload=event_payload,
            idempotency_key=effect_fields["delivery_key"],
        )
        effect = (
            Effect.objects.select_for_update()
            .filter(delivery_key=effect_fields["delivery_key"])
            .first()
        )
        if effect is None:
            effect = Effect.objects.create(**effect_fields, attempts=1, status=Effect.Status.INTENT)
        else:
            # Back to intent before the new attempt: if this attempt dies, nobody may read an
            # earlier "failed" as "nothing happened".
            Effect.objects.filter(pk=effect.pk).update(
                attempts=F("attempts") + 1, status=Effect.Status.INTENT, error="", updated_at=Now()
            )
            effect.refresh_from_db()
        effect._called_event = event  # type: ignore[attr-defined]
        return effect


def record_outcome(
    writer: Writer,
    effect: Effect,
    *,
    status: str,
    external_id: str = "",
    result: Any = None,
    error: str = "",
    cost: Any = 0,
    event_type: str = Event.Type.TOOL_RESULT,
    event_payload: dict | None = None,
    run_status: str | None = None,
) -> Event:
    """Write back what the call produced (or what is known of it) with its event."""
    with transaction.atomic():
        event = append(
            writer,
            event_type,
            stage=effect.stage,
            payload=event_payload
            or {
                "call": effect.call_id,
                "tool": effect.tool,
                "status": status,
                "external_id": external_id,
                "error": error,
            },
            idempotency_key=effect.delivery_key,
            status=run_status,
        )
        Effect.objects.filter(pk=effect.pk).update(
            status=status,
            external_id=external_id,
            result=result,
            error=error,
            cost=cost,
            updated_at=Now(),
        )
        return event


# --- Checkpoints ---------------------------------------------------------------------------


def checkpoint_id(run: Run, stage: str) -> str:
    base = f"{run.public_id}:{stage}-verified"
    taken = Checkpoint.objects.filter(run=run, stage=stage).count()
    return base if taken == 0 else f"{base}-{taken + 1}"


def write_checkpoint(
    writer: Writer,
    run: Run,
    *,
    stage: str,
    next_stage: str,
    manifest: dict[str, Any],
    status: str,
    **run_fields: Any,
) -> Checkpoint:
    """Append VERIFIED and seal the checkpoint on that seq, in one transaction: a checkpoint
    without its VERIFIED event (or the reverse) can never be observed."""
    with transaction.atomic():
        verified = append(
            writer,
            Event.Type.VERIFIED,
            stage=stage,
            inputs=manifest.get("inputs", {}),
            payload={"rules": manifest.get("rules", []), "next_stage": next_stage},
            artifacts=[a["uri"] for a in manifest.get("artifacts", [])],
            status=status,
            **run_fields,
        )
        return Checkpoint.objects.create(
            id=checkpoint_id(run, stage),
            run=run,
            last_seq=verified.seq,
            stage=stage,
            next_stage=next_stage,
            manifest=manifest,
        )


# --- Maintenance ---------------------------------------------------------------------------


@contextmanager
def maintenance(using: str = "default") -> Iterator[None]:
    """Lift the append-only triggers for this connection only (test teardown's flush, a
    retention purge). Any other connection, and any raw client, stays refused."""
    connection = connections[using]
    connection.ensure_connection()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('resumer.maintenance', 'on', false)")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('resumer.maintenance', 'off', false)")
    else:
        connection._resumer_maintenance = True  # type: ignore[attr-defined]
        try:
            yield
        finally:
            connection._resumer_maintenance = False  # type: ignore[attr-defined]


# --- Supervisor edits ----------------------------------------------------------------------

EDITABLE_EFFECT_FIELDS = ("status", "external_id", "error")


def edit_effect(effect_pk: int, changes: dict[str, Any], *, reason: str, actor: str) -> Event:
    """A supervisor's correction of the effect ledger (e.g. "the card was not charged").

    Never silent: it needs a reason, takes the run's lease (so no worker writes beside it),
    and appends LEDGER_EDITED with the user and the before/after values."""
    reason = (reason or "").strip()
    if not reason:
        raise LedgerError("a ledger edit needs a reason")
    unknown = set(changes) - set(EDITABLE_EFFECT_FIELDS)
    if unknown:
        raise LedgerError(f"effect fields {sorted(unknown)} cannot be edited")
    effect = Effect.objects.filter(pk=effect_pk).first()
    if effect is None:
        raise LedgerError(f"effect {effect_pk} does not exist")
    status = changes.get("status", effect.status)
    if status not in Effect.Status.values:
        raise LedgerError(f"unknown effect status {status!r}")
    external_id = str(changes.get("external_id", effect.external_id) or "").strip()
    if status == Effect.Status.CONFIRMED and not external_id:
        raise LedgerError("a confirmed effect needs the external id it produced")
    before = {f: getattr(effect, f) for f in EDITABLE_EFFECT_FIELDS}
    after = {**before, **changes, "status": status, "external_id": external_id}
    if after == before:
        raise LedgerError("nothing changed")
    run = Run.objects.get(pk=effect.run_id)
    if run.is_active:
        raise LedgerError(
            f"{run.public_id} is {run.status}: a worker owns its ledger; edit it once the run "
            "is interrupted, failed or waiting for approval"
        )
    try:
        token = leases.acquire(run.pk, actor)
    except leases.LeaseBusy as exc:
        raise LedgerError(f"{run.public_id} is leased by a worker right now") from exc
    try:
        with transaction.atomic():
            event = append(
                Writer(run.pk, token, actor),
                Event.Type.LEDGER_EDITED,
                stage=effect.stage,
                idempotency_key=effect.delivery_key,
                payload={
                    "effect": effect.pk,
                    "call": effect.call_id,
                    "tool": effect.tool,
                    "before": before,
                    "after": after,
                    "reason": reason,
                    "by": actor,
                },
            )
            Effect.objects.filter(pk=effect.pk).update(
                status=after["status"],
                external_id=after["external_id"],
                error=after["error"],
                updated_at=Now(),
            )
        return event
    finally:
        leases.release(run.pk, token)

"""What an append writes, worked out before any SQL runs.

A writer's event (runs/events.py) and what it moves on its run (`RunMove`) are checked and
encoded once (`new_event`), whichever path writes them; the run's head it goes on is a `Head`; `refusal` is what the ledger refuses to append to that run;
`event_row` chains the event to the head (its hash) as the row the insert writes, and
`head_moves` is what the append moves on the run. append.py runs them; sql/ writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.conf import settings
from django.db.models.functions import Now

from runs import ids
from runs.events import RunEvent, Succeeded, stored_body
from runs.ledger import artifacts as artifact_store
from runs.ledger.chain import canonical_json, encoded_event_hash, head_anchor
from runs.ledger.sql.shapes import CheckpointSeal, EffectWrite, EventRow, Moves
from runs.models import Run
from runs.pipeline import registry

__all__ = [
    "NO_END",
    "Head",
    "LedgerError",
    "NewEvent",
    "RunMove",
    "StageEnd",
    "closing_event",
    "event_row",
    "head_after",
    "head_moves",
    "new_event",
    "refusal",
]

# Run fields the append path may set beside status; everything else about a run is fixed.
MOVABLE_RUN_FIELDS = frozenset({"current_stage", "ticket", "queued_at", "attempt", "deviated"})
# Choices' .values builds a new list on every access; the append path checks this each time.
RUN_STATUSES = frozenset(Run.Status.values)


class LedgerError(ValueError):
    """A write the ledger refuses: unknown type or stage, illegal transition, bad payload."""


@dataclass(frozen=True)
class Writer:
    """Who writes, and under which fencing token."""

    run_id: int
    token: int
    actor: str


@dataclass(frozen=True, slots=True, init=False)
class RunMove:
    """What an append moves on its run beside its head: its status (None leaves it) and
    MOVABLE_RUN_FIELDS, each a value or Now() for the database's clock."""

    status: str | None
    fields: Mapping[str, Any]

    def __init__(self, status: str | None = None, **fields: Any) -> None:
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "fields", fields)


STAY = RunMove()


@dataclass(frozen=True, slots=True)
class NewEvent:
    """What a writer asks to append, checked and encoded once, whichever path writes it."""

    actor: str
    token: int | None  # None only for RUN_CREATED
    type: str
    stage: str
    payload: dict[str, Any]
    encoded: bytes  # canonical JSON of payload, already checked against the hard limit
    artifacts: list[str]
    idempotency_key: str
    inputs: dict[str, Any]
    status: str | None  # the run's new status, or None to leave it
    run_fields: Mapping[str, Any]  # MOVABLE_RUN_FIELDS to set: a value or Now()


class Head(NamedTuple):
    """What the append path reads of the run, under its lock. A tuple: two are built on
    every append (the head it leaves, the one this process then knows), and a frozen
    dataclass's constructor and `replace()` cost a tool call several microseconds each."""

    pk: int
    pipeline: str
    status: str
    last_seq: int
    head_hash: str
    deviated: bool = False
    # Known heads only: the seq of this writer's last write that is certainly committed (one
    # that was its own transaction), which the run's head can never be behind
    # (append._went_back). A write inside a caller's transaction may still roll back, so it
    # does not move this.
    committed_seq: int = 0

    @property
    def public_id(self) -> str:
        return ids.run_id(self.pk)


def new_event(actor: str, token: int | None, event: RunEvent, move: RunMove = STAY) -> NewEvent:
    """append()'s request, checked as far as it can be without the run, and encoded; raises
    LedgerError for what is not an event of runs/events.py, an unknown status or run field,
    or an oversized payload."""
    if not isinstance(event, RunEvent):
        raise LedgerError(f"{event!r} is not an event (runs/events.py)")
    if move.status is not None and move.status not in RUN_STATUSES:
        raise LedgerError(f"unknown run status {move.status!r}")
    unknown = set(move.fields) - MOVABLE_RUN_FIELDS if move.fields else None
    if unknown:
        raise LedgerError(f"run fields {sorted(unknown)} are not set through events")
    payload, encoded = _encode_payload(event.to_payload())
    return NewEvent(
        actor=actor,
        token=token,
        type=event.type,
        stage=event.stage,
        payload=payload,
        encoded=encoded,
        artifacts=list(event.artifact_refs),
        idempotency_key=event.idempotency_key,
        inputs=event.input_versions or {},
        status=move.status,
        run_fields=move.fields,
    )


def refusal(run: Head, new: NewEvent) -> LedgerError | None:
    """What the ledger refuses to append to this run, before anything is written."""
    if new.stage and new.stage not in registry.get(run.pipeline).stage_names:
        return LedgerError(f"unknown stage {new.stage!r} for pipeline {run.pipeline!r}")
    if new.status is not None and new.status != run.status and run.status in Run.TERMINAL:
        return LedgerError(f"{run.public_id} is {run.status}; its status no longer moves")
    for name, value in new.run_fields.items():
        if hasattr(value, "resolve_expression") and not isinstance(value, Now):
            return LedgerError(f"run field {name} takes a value or Now(), not {value!r}")
    return None


@dataclass(frozen=True, slots=True)
class StageEnd:
    """What rides with a stage's last events: the checkpoint's seal, the event that follows
    (a run's last), the lease's release."""

    seal: CheckpointSeal | None = None
    release: bool = False
    then: NewEvent | None = None

    @classmethod
    def of(
        cls,
        effect: EffectWrite | None,
        seal: CheckpointSeal | None,
        release: bool,
        then: NewEvent | None = None,
    ):
        if effect is not None and (seal is not None or release or then is not None):
            raise LedgerError("an effect rides alone: not with a checkpoint's seal or a release")
        return cls(seal, release, then)


NO_END = StageEnd()

# A run's terminal status -> the event that says it, for append's `then`.
CLOSING = {Run.Status.SUCCEEDED: Succeeded}


def closing_event(writer: Writer, new: NewEvent, status: str | None) -> NewEvent | None:
    """The event that ends the run as `status` after `new`. Checked here, before anything is
    written, as far as refusal() would check it on the head `new` leaves: that head's status
    is `new`'s, which must leave the run's status free to move."""
    if status is None:
        return None
    if status not in CLOSING:
        raise LedgerError(f"no event follows another to end a run as {status!r}")
    if new.status in Run.TERMINAL:
        raise LedgerError(f"a run {new.status} by {new.type} ends with no event after it")
    return new_event(writer.actor, writer.token, CLOSING[status](), RunMove(status))


def head_after(head: Head, new: NewEvent, row: EventRow, committed_seq: int = 0) -> Head:
    """The head `row` (appending `new`) leaves, as the next event in the same write sees it;
    `committed_seq` as Head's."""
    return Head(
        head.pk,
        head.pipeline,
        new.status or head.status,
        row.seq,
        row.hash,
        bool(new.run_fields.get("deviated", head.deviated)) if new.run_fields else head.deviated,
        committed_seq,
    )


def event_row(run: Head, new: NewEvent) -> tuple[EventRow, dict[str, Any]]:
    """The row that appends `new` to `run`'s head, and the payload as the event holds it
    (the payload itself, or what stands for the artifact a large one went to)."""
    seq = run.last_seq + 1
    body, payload_ref, payload_json = _place_payload(run.pk, seq, new.payload, new.encoded)
    # JSON columns get the canonical text the hash is computed over (the database parses it;
    # PostgreSQL casts the literal to jsonb), instead of a second, differently spaced
    # encoding; the hash reuses the same text (chain.encoded_event_hash).
    inputs_json = canonical_json(new.inputs) if new.inputs else "{}"
    artifacts_json = canonical_json(new.artifacts) if new.artifacts else "[]"
    # The row's columns but its own hash are what the hash covers: named once, for both.
    columns = {
        "run_id": run.pk,
        "seq": seq,
        "stage": new.stage,
        "type": new.type,
        "inputs": inputs_json,
        "payload": payload_json,
        "payload_ref": payload_ref,
        "artifacts": artifacts_json,
        "idempotency_key": new.idempotency_key,
        "actor": new.actor,
        "token": new.token,
        "prev_hash": run.head_hash,
    }
    row = EventRow(**columns, hash=encoded_event_hash(**columns))
    return row, body


def head_moves(connection, run: Head, new: NewEvent, row: EventRow) -> Moves:
    """What the append moves on the run: its head, to `row`, and whatever `new` sets."""
    # The anchor is computed here, in Python, and moves with the head in the same statement.
    moves: Moves = {
        "last_seq": row.seq,
        "head_hash": row.hash,
        "head_anchor": head_anchor(run.pk, row.seq, row.hash),
    }
    if new.status is not None:
        moves["status"] = new.status
    if new.status is not None or "deviated" in new.run_fields:
        # A run whose resumed work departed from its plan stays with those that need a human.
        deviated = bool(new.run_fields.get("deviated", run.deviated))
        moves["attention"] = Run.attention_for(new.status or run.status, deviated)
        moves["severity"] = Run.severity_for(new.status or run.status, deviated)
    for name, value in new.run_fields.items():
        field = Run._meta.get_field(name)
        moves[field.column] = (
            value if isinstance(value, Now) else field.get_db_prep_save(value, connection)
        )
    return moves


def _encode_payload(payload: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """The payload and its canonical encoding; refuses one above the hard limit."""
    encoded = canonical_json(payload).encode()
    if len(encoded) > settings.RESUMER_MAX_PAYLOAD_BYTES:
        raise LedgerError(
            f"payload of {len(encoded)} bytes exceeds the limit of "
            f"{settings.RESUMER_MAX_PAYLOAD_BYTES} bytes"
        )
    return payload, encoded


def _place_payload(
    run_id: int, seq: int, payload: dict[str, Any], encoded: bytes
) -> tuple[dict[str, Any], str, str]:
    """Small payloads stay inline; large ones go to an artifact the event references, with
    a short summary inline for the timeline (events.stored_body).
    Returns the event's payload, its payload_ref and the payload's JSON text."""
    if len(encoded) <= settings.RESUMER_INLINE_PAYLOAD_BYTES:
        return payload, "", encoded.decode()
    stored = artifact_store.store(f"payload/run-{run_id}/{seq}", encoded, "application/json")
    body = stored_body(stored.uri, len(encoded), payload)
    return body, stored.uri, canonical_json(body)

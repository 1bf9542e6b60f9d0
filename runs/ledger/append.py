"""The one append path of the run ledger.

Everything that moves a run's state goes through `append()` (or a helper that calls it inside
the same transaction: effects.py, checkpoints.py, edits.py): it checks the writer's fencing
token under the run's row lock, assigns the next `seq`, chains the event's hash to its
predecessor (chain.py), and moves the run's status. The SQL it runs is the vendor's
(dialects.py).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models.functions import Now

from runs import notify, signals
from runs.ledger import sql as dialects
from runs.ledger.chain import canonical_json, encoded_event_hash, head_anchor
from runs.ledger.leases import LeaseLost
from runs.ledger.payload_summary import summarize
from runs.ledger.sql import EffectWrite, KeyTaken
from runs.models import Checkpoint, Event, Lease, Run

__all__ = [
    "HeadLost",
    "KeyTaken",
    "LeaseLost",
    "LedgerError",
    "NewEvent",
    "Writer",
    "append",
    "create_run",
]

# Run fields the append path may set beside status; everything else about a run is fixed.
MOVABLE_RUN_FIELDS = frozenset({"current_stage", "ticket", "queued_at", "attempt", "deviated"})
# Choices' .values builds a new list on every access; the append path checks these each time.
EVENT_TYPES = frozenset(Event.Type.values)
RUN_STATUSES = frozenset(Run.Status.values)
# Event's fields in model order, as _write() builds its instance from what it wrote
# (test_ledger checks they are the model's).
EVENT_FIELDS = ("id", *dialects.EVENT_COLUMNS, "created_at")


class LedgerError(ValueError):
    """A write the ledger refuses: unknown type or stage, illegal transition, bad payload."""


@dataclass(frozen=True)
class Writer:
    """Who writes, and under which fencing token."""

    run_id: int
    token: int
    actor: str


@dataclass(frozen=True, slots=True)
class NewEvent:
    """What a writer asks to append, checked and encoded once, whichever path writes it."""

    actor: str
    token: int | None  # None only for RUN_CREATED
    type: str
    stage: str
    payload: dict[str, Any]
    encoded: bytes  # canonical JSON of payload, already checked against the hard limit
    artifacts: Sequence[str]
    idempotency_key: str
    inputs: dict[str, Any] | None
    status: str | None  # the run's new status, or None to leave it
    run_fields: Mapping[str, Any]  # MOVABLE_RUN_FIELDS to set: a value or Now()


@dataclass(frozen=True)
class _Head:
    """What the append path reads of the run, under its lock."""

    pk: int
    pipeline: str
    status: str
    last_seq: int
    head_hash: str
    deviated: bool = False
    # Known heads only: the seq of this writer's last write that is certainly committed (one
    # that was its own transaction), which the run's head can never be behind (_went_back).
    # A write inside a caller's transaction may still roll back, so it does not move this.
    committed_seq: int = 0

    @property
    def public_id(self) -> str:
        return f"run-{self.pk}"


def _stage_names(pipeline: str) -> tuple[str, ...]:
    from runs.pipeline import registry

    return registry.get(pipeline).stage_names


def _encode_payload(payload: dict[str, Any] | None) -> tuple[dict[str, Any], bytes]:
    """The payload and its canonical encoding; refuses one above the hard limit."""
    payload = payload or {}
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
    a short summary inline for the timeline (runs/payload_summary.py).
    Returns the event's payload, its payload_ref and the payload's JSON text."""
    if len(encoded) <= settings.RESUMER_INLINE_PAYLOAD_BYTES:
        return payload, "", encoded.decode()
    from runs.ledger import artifacts

    stored = artifacts.store(f"payload/run-{run_id}/{seq}", encoded, "application/json")
    body = {"stored_as": stored.uri, "bytes": len(encoded), "summary": summarize(payload)}
    return body, stored.uri, canonical_json(body)


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
    effect: EffectWrite | None = None,
    flush: bool = True,
    **run_fields: Any,
) -> Event:
    """Append one event to the writer's run, fenced by its lease; optionally move the run,
    and write an effect row with the event (effects.py: an intent claiming its delivery key,
    or an outcome), whose id the event then carries as `effect_pk`.

    `flush=False` is for a write whose loss in a database crash leaves a state the protocol
    already recovers from, as if the worker had died just before it: a SAFE call's events, a
    confirmed outcome (its intent is on disk, so the call is reconciled or retried under its
    key, never made blind), a re-use of a confirmed effect. Its commit is a commit (every
    reader sees it at once) but does not wait for the disk, unless RESUMER_DEFER_FLUSH is
    off; the next flushed commit carries it there (dialects.py). It applies only to an
    append that is its own transaction: inside a caller's, the caller's commit decides.

    Raises LeaseLost (nothing written) when the token is stale or expired (HeadLost, one of
    them, when the head went back behind this writer's last write), LedgerError for an
    unknown type or stage, an illegal status move or an oversized payload, KeyTaken (nothing
    written) when a claimed delivery key has an effect already.
    """
    if type not in EVENT_TYPES:
        raise LedgerError(f"unknown event type {type!r}")
    if status is not None and status not in RUN_STATUSES:
        raise LedgerError(f"unknown run status {status!r}")
    unknown = set(run_fields) - MOVABLE_RUN_FIELDS
    if unknown:
        raise LedgerError(f"run fields {sorted(unknown)} are not set through events")
    payload, encoded = _encode_payload(payload)
    new = NewEvent(
        actor=writer.actor,
        token=writer.token,
        type=type,
        stage=stage,
        payload=payload,
        encoded=encoded,
        artifacts=artifacts,
        idempotency_key=idempotency_key,
        inputs=inputs,
        status=status,
        run_fields=run_fields,
    )
    connection = connections[DEFAULT_DB_ALIAS]
    sql = dialects.for_connection(connection)
    refused: Exception
    # This process wrote the run's last event under this token, so it knows the head: the
    # guarded write then fences (token, expiry *and* that the head is still the one it knows)
    # in its first statement instead of a locked read before it. If anything moved, it writes
    # nothing and the locked read below decides.
    known = _known_heads.get((connection.alias, writer.run_id, writer.token))
    guarded = (
        known is not None
        and sql.guarded
        and len(encoded) <= settings.RESUMER_INLINE_PAYLOAD_BYTES
        and _refusal(known, new) is None
    )
    if guarded and not connection.in_atomic_block and connection.get_autocommit():
        # The common case, a tool call's event: no caller's transaction is open, so the
        # guarded write is its own (dialects.write_alone). On PostgreSQL it is one statement
        # that locks, fences, inserts, moves the head and writes the effect: one round trip,
        # where BEGIN and COMMIT around it would make three.
        event = _write(
            connection,
            known,
            new,
            guarded=True,
            alone=True,
            effect=effect,
            flush=flush or not settings.RESUMER_DEFER_FLUSH,
        )
        if event is not None:
            return _appended(connection, writer, known, event, new, committed=True)
        guarded = False
    # No savepoint when nested: most appends run inside a caller's transaction (a checkpoint,
    # an HTTP tool's exchanges), and a savepoint would cost two more round trips each. What
    # append refuses it raises *after* this block, having written nothing, so a refusal never
    # poisons the caller's transaction; only a database error (which breaks it anyway) does.
    with transaction.atomic(savepoint=False):
        if guarded:
            event = _write(connection, known, new, guarded=True, effect=effect)
            if event is not None:
                return _appended(connection, writer, known, event, new)
        # The fencing check and the row lock are one statement (see dialects.py for what each
        # vendor locks).
        with connection.cursor() as cursor:
            row = sql.read_head(cursor, writer.run_id, writer.token)
        if row is None:
            if Run.objects.filter(pk=writer.run_id).exists():
                refused = LeaseLost(writer.run_id, writer.token)
            else:
                refused = LedgerError(f"run-{writer.run_id} does not exist")
        else:
            head = _Head(writer.run_id, *row)
            problem = _went_back(writer, known, head) or _refusal(head, new)
            if problem is None:
                event = _write(connection, head, new, effect=effect)
                if event is not None:
                    return _appended(connection, writer, head, event, new)
                refused = KeyTaken(f"delivery key {new.idempotency_key} has an effect already")
            else:
                refused = problem
    raise refused


# Run heads this process wrote last, per (database, run, token): what the guarded append
# needs to know. A stale entry costs one statement that writes nothing, never a wrong write.
_known_heads: dict[tuple[str, int, int], _Head] = {}
_known_heads_lock = threading.Lock()
_KNOWN_HEADS_MAX = 1024


def _appended(
    connection, writer: Writer, head: _Head, event: Event, new: NewEvent, *, committed: bool = False
) -> Event:
    _remember(connection, writer.token, head, event, new, committed)
    _after_append(event, head, new)
    return event


def _remember(
    connection, token: int, head: _Head, event: Event, new: NewEvent, committed: bool
) -> None:
    key = (connection.alias, head.pk, token)
    with _known_heads_lock:
        before = _known_heads.get(key)
        if before is None and len(_known_heads) >= _KNOWN_HEADS_MAX:
            del _known_heads[next(iter(_known_heads))]  # the oldest entry
        _known_heads[key] = _Head(
            head.pk,
            head.pipeline,
            new.status or head.status,
            event.seq,
            event.hash,
            bool(new.run_fields.get("deviated", head.deviated)),
            event.seq if committed else (before.committed_seq if before else 0),
        )


def _after_append(event: Event, head: _Head, new: NewEvent) -> None:
    """What follows an append once its transaction commits: a run that stopped for a human
    gets its plan computed, and people hear of it (runs/notify.py). Both only register
    after-commit callbacks, so a rolled-back append tells nobody, and neither raises."""
    announce_stop(head.pk, new.status)
    notify.on_append(event, head.status, new.status)


def announce_stop(run_id: int, status: str | None) -> None:
    """A run that stopped where a human resolves it (or whose facts changed while it waits
    there) is announced once the transaction commits: its plan is computed then, and people
    are told. A receiver's failure never undoes the stop."""
    if status in Run.RESUMABLE:
        transaction.on_commit(
            lambda: signals.run_stopped.send(sender=Run, run_pk=run_id, status=status),
            robust=True,
        )


class HeadLost(LeaseLost):
    """The run's head is behind what this writer wrote under its token: writes it was told
    were committed are gone (a database crash took the last ones that did not wait for the
    disk, or the database was restored). The writer stops, writing nothing: what it knows no
    longer matches the log, and the resume's plan starts from the log."""

    def __init__(self, run_id: int, token: int | None, seq: int, known: int) -> None:
        Exception.__init__(
            self,
            f"run-{run_id}'s head is at seq {seq}, behind the seq {known} this worker wrote "
            f"under fencing token {token}: its last writes were lost, so nothing more was "
            "written",
        )
        self.run_id = run_id
        self.token = token


def _went_back(writer: Writer, known: _Head | None, head: _Head) -> HeadLost | None:
    # While a token holds, only its writer moves the head, and only forward. Going on from a
    # head that went back would build on a log missing what this worker did (an outcome it
    # acted on), so it must not.
    if known is not None and head.last_seq < known.committed_seq:
        return HeadLost(writer.run_id, writer.token, head.last_seq, known.committed_seq)
    return None


def _refusal(run: _Head, new: NewEvent) -> LedgerError | None:
    """What the ledger refuses to append to this run, before anything is written."""
    if new.stage and new.stage not in _stage_names(run.pipeline):
        return LedgerError(f"unknown stage {new.stage!r} for pipeline {run.pipeline!r}")
    if new.status is not None and new.status != run.status and run.status in Run.TERMINAL:
        return LedgerError(f"{run.public_id} is {run.status}; its status no longer moves")
    for name, value in new.run_fields.items():
        if hasattr(value, "resolve_expression") and not isinstance(value, Now):
            return LedgerError(f"run field {name} takes a value or Now(), not {value!r}")
    return None


def _write(
    connection,
    run: _Head,
    new: NewEvent,
    *,
    guarded: bool = False,
    alone: bool = False,
    effect: EffectWrite | None = None,
    flush: bool = True,
) -> Event | None:
    """Write the event, move the run's head and write `effect`. The caller has checked what
    _refusal() checks, and holds the run's lock, or asks for the `guarded` write, which
    fences itself and writes nothing (returns None) unless the lease is still the writer's
    and the run's head is still `run`'s; `alone`, as its own transaction (the caller has no
    transaction open), which does not wait for the disk unless `flush` (append() passes
    False only then). None too, having written nothing, when `effect` claims a delivery key
    that is taken."""
    sql = dialects.for_connection(connection)
    seq = run.last_seq + 1
    body, payload_ref, payload_json = _place_payload(run.pk, seq, new.payload, new.encoded)
    inputs = new.inputs or {}
    artifacts = list(new.artifacts)
    # JSON columns get the canonical text the hash is computed over (the database parses it;
    # PostgreSQL casts the literal to jsonb), instead of a second, differently spaced
    # encoding; the hash reuses the same text (chain.encoded_event_hash).
    inputs_json = canonical_json(inputs) if inputs else "{}"
    artifacts_json = canonical_json(artifacts) if artifacts else "[]"
    event_hash = encoded_event_hash(
        run.head_hash,
        run=run.pk,
        seq=seq,
        stage=new.stage,
        type=new.type,
        inputs=inputs_json,
        payload=payload_json,
        payload_ref=payload_ref,
        artifacts=artifacts_json,
        idempotency_key=new.idempotency_key,
        actor=new.actor,
        token=new.token,
    )
    # In dialects.EVENT_COLUMNS order.
    row = (
        run.pk,
        seq,
        new.stage,
        new.type,
        inputs_json,
        payload_json,
        payload_ref,
        artifacts_json,
        new.idempotency_key,
        new.actor,
        new.token,
        run.head_hash,
        event_hash,
    )
    # The anchor is computed here, in Python, and moves with the head in the same statement.
    moves: dialects.Moves = {
        "last_seq": seq,
        "head_hash": event_hash,
        "head_anchor": head_anchor(run.pk, seq, event_hash),
    }
    if new.status is not None:
        moves["status"] = new.status
    if new.status is not None or "deviated" in new.run_fields:
        # A run whose resumed work departed from its plan stays with those that need a human.
        deviated = bool(new.run_fields.get("deviated", run.deviated))
        moves["attention"] = Run.attention_for(new.status or run.status, deviated)
    for name, value in new.run_fields.items():
        field = Run._meta.get_field(name)
        moves[field.column] = (
            value if isinstance(value, Now) else field.get_db_prep_save(value, connection)
        )
    with connection.cursor() as cursor:
        if guarded:
            written = (sql.write_alone if alone else sql.write_guarded)(
                cursor,
                row,
                moves,
                run.pk,
                token=new.token,
                last_seq=run.last_seq,
                head_hash=run.head_hash,
                effect=effect,
                flush=flush,
            )
        else:
            written = sql.write(cursor, row, moves, run.pk, effect=effect)
    if written is None:
        return None
    pk, created_at, effect_pk = written
    # The row exists now: the instance is what a query would have returned (from_db, in
    # EVENT_FIELDS order, is half the cost of Event(**fields) and marks it saved).
    event = Event.from_db(
        connection.alias,
        EVENT_FIELDS,
        (
            pk,
            run.pk,
            seq,
            new.stage,
            new.type,
            inputs,
            body,
            payload_ref,
            artifacts,
            new.idempotency_key,
            new.actor,
            new.token,
            run.head_hash,
            event_hash,
            sql.created_at(created_at, connection, pk),
        ),
    )
    event.effect_pk = effect_pk
    return event


def create_run(
    pipeline: str,
    *,
    inputs: dict[str, Any],
    actor: str,
    first_stage: str,
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
            current_stage=first_stage,
            parent=parent,
            branch_checkpoint=branch_checkpoint,
            status=Run.Status.PENDING,
            attention=Run.attention_for(Run.Status.PENDING),
            ticket=ticket,
            queued_at=Now() if ticket else None,
        )
        Lease.objects.create(run=run, token=0, holder="")
        body, encoded = _encode_payload(payload)
        created = NewEvent(
            actor=actor,
            token=None,
            type=Event.Type.RUN_CREATED,
            stage="",
            payload=body,
            encoded=encoded,
            artifacts=(),
            idempotency_key="",
            inputs=inputs,
            status=None,
            run_fields={},
        )
        _write(
            connections[DEFAULT_DB_ALIAS], _Head(run.pk, run.pipeline, run.status, 0, ""), created
        )
        run.refresh_from_db()
        return run

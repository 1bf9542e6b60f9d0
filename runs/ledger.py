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
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import F
from django.db.models.functions import Now

from runs import leases, notify
from runs.leases import LeaseLost
from runs.models import Checkpoint, Effect, Event, Lease, Run
from runs.pipeline import Reconciliation

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
# Choices' .values builds a new list on every access; the append path checks these each time.
EVENT_TYPES = frozenset(Event.Type.values)
RUN_STATUSES = frozenset(Run.Status.values)


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
    """Small payloads stay inline; large ones go to an artifact the event references.
    Returns the event's payload, its payload_ref and the payload's JSON text."""
    if len(encoded) <= settings.RESUMER_INLINE_PAYLOAD_BYTES:
        return payload, "", encoded.decode()
    from runs import artifacts

    stored = artifacts.store(f"payload/run-{run_id}/{seq}", encoded, "application/json")
    body = {"stored_as": stored.uri, "bytes": len(encoded)}
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
    **run_fields: Any,
) -> Event:
    """Append one event to the writer's run, fenced by its lease; optionally move the run.

    Raises LeaseLost (nothing written) when the token is stale or expired, LedgerError for an
    unknown type or stage, an illegal status move or an oversized payload.
    """
    if type not in EVENT_TYPES:
        raise LedgerError(f"unknown event type {type!r}")
    if status is not None and status not in RUN_STATUSES:
        raise LedgerError(f"unknown run status {status!r}")
    unknown = set(run_fields) - MOVABLE_RUN_FIELDS
    if unknown:
        raise LedgerError(f"run fields {sorted(unknown)} are not set through events")
    payload, encoded = _encode_payload(payload)
    connection = connections[DEFAULT_DB_ALIAS]
    sql = _sql(connection)
    refused: Exception
    # No savepoint when nested: most appends run inside a caller's transaction (an effect
    # intent, a checkpoint), and a savepoint would cost two more round trips each. What
    # append refuses it raises *after* this block, having written nothing, so a refusal never
    # poisons the caller's transaction; only a database error (which breaks it anyway) does.
    with transaction.atomic(savepoint=False):
        # PostgreSQL, the common case: this process wrote the run's last event under this
        # token, so it knows the head. One statement then locks, fences (token, expiry *and*
        # that the head is still the one it knows), inserts and moves the head. If anything
        # moved, it writes nothing and the locked read below decides.
        # What to write, whichever path writes it.
        what = (writer.actor, writer.token, type, stage, payload, encoded, artifacts)
        what += (idempotency_key, inputs, status, run_fields)
        known = _known_heads.get((connection.alias, writer.run_id, writer.token))
        if (
            known is not None
            and sql.guarded
            and len(encoded) <= settings.RESUMER_INLINE_PAYLOAD_BYTES
            and _refusal(known, stage, status, run_fields) is None
        ):
            event = _insert(connection, known, *what, guarded=True)
            if event is not None:
                _remember(connection, writer.token, known, event, status)
                return event
        # The fencing check and the row lock are one statement. On PostgreSQL it locks the
        # run row (serialising appends to the run) *and* the lease row: a takeover that
        # commits while this write waits for the lock is then re-checked against the
        # lease's newest version, not the one this statement first read. On SQLite the
        # IMMEDIATE transaction already holds the database's write lock.
        with connection.cursor() as cursor:
            cursor.execute(sql.lock, [writer.run_id, writer.token])
            row = cursor.fetchone()
        if row is None:
            if Run.objects.filter(pk=writer.run_id).exists():
                refused = LeaseLost(writer.run_id, writer.token)
            else:
                refused = LedgerError(f"run-{writer.run_id} does not exist")
        else:
            head = _Head(writer.run_id, *row)
            problem = _refusal(head, stage, status, run_fields)
            if problem is None:
                event = _insert(connection, head, *what)
                assert event is not None
                _remember(connection, writer.token, head, event, status)
                return event
            refused = problem
    raise refused


@dataclass(frozen=True)
class _Head:
    """What the append path reads of the run, under its lock."""

    pk: int
    pipeline: str
    status: str
    last_seq: int
    head_hash: str

    @property
    def public_id(self) -> str:
        return f"run-{self.pk}"


# Run heads this process wrote last, per (database, run, token): what the guarded append
# needs to know. A stale entry costs one statement that writes nothing, never a wrong write.
_known_heads: dict[tuple[str, int, int], _Head] = {}
_known_heads_lock = threading.Lock()
_KNOWN_HEADS_MAX = 1024


def _remember(connection, token: int, head: _Head, event: Event, status: str | None) -> None:
    with _known_heads_lock:
        if len(_known_heads) >= _KNOWN_HEADS_MAX:
            del _known_heads[next(iter(_known_heads))]  # the oldest entry
        _known_heads[(connection.alias, head.pk, token)] = _Head(
            head.pk, head.pipeline, status or head.status, event.seq, event.hash
        )


def _refusal(
    run: _Head, stage: str, status: str | None, run_fields: dict[str, Any]
) -> LedgerError | None:
    """What the ledger refuses to append to this run, before anything is written."""
    if stage and stage not in _stage_names(run.pipeline):
        return LedgerError(f"unknown stage {stage!r} for pipeline {run.pipeline!r}")
    if status is not None and status != run.status and run.status in Run.TERMINAL:
        return LedgerError(f"{run.public_id} is {run.status}; its status no longer moves")
    for name, value in run_fields.items():
        if hasattr(value, "resolve_expression") and not isinstance(value, Now):
            return LedgerError(f"run field {name} takes a value or Now(), not {value!r}")
    return None


# The append path is the hottest code in Resumer (every tool call writes two events), so its
# statements are written once per database vendor in SQL instead of being compiled by the ORM
# on every call. On PostgreSQL, where each statement is a round trip, the event insert and
# the run head update are one statement, and a writer that knows the head (it wrote the last
# event) locks, fences, inserts and updates in a single one. bench/ledger_append.py measures
# what this buys.
EVENT_COLUMNS = (
    "run_id",
    "seq",
    "stage",
    "type",
    "inputs",
    "payload",
    "payload_ref",
    "artifacts",
    "idempotency_key",
    "actor",
    "token",
    "prev_hash",
    "hash",
)


@dataclass(frozen=True)
class _AppendSQL:
    now: str
    lock: str
    # "INSERT ... RETURNING id, created_at"
    insert: str
    # PostgreSQL: "WITH e AS (<insert>), u AS (<update>) SELECT id, created_at FROM e";
    # "" elsewhere (the update is its own statement).
    insert_and_update: str
    # "UPDATE run SET {sets} WHERE id = %s": the SET list depends on what an append moves.
    update: str
    # PostgreSQL: lock + fence + head check + insert + head update in one statement (see
    # append); "" elsewhere.
    guarded: str
    returning: bool
    created_at: tuple[Any, list[Any]]  # the column expression and its converters


_SQL_CACHE: dict[str, _AppendSQL] = {}


def _sql(connection) -> _AppendSQL:
    cached = _SQL_CACHE.get(connection.vendor)
    if cached is not None:
        return cached
    from django.db.models.sql import Query

    qn = connection.ops.quote_name
    # Django's own Now() for this backend, so every clock comparison agrees with the lease
    # writes in leases.py (STATEMENT_TIMESTAMP() on PostgreSQL, STRFTIME on SQLite).
    now, _ = Query(Run).get_compiler(connection=connection).compile(Now())
    run_t, lease_t, event_t = (qn(m._meta.db_table) for m in (Run, Lease, Event))
    lock_of = " FOR UPDATE OF r, l" if connection.features.has_select_for_update_of else ""
    fence = (
        f"FROM {run_t} r INNER JOIN {lease_t} l ON (l.{qn(Lease._meta.pk.column)} = r.{qn('id')}) "
        f"WHERE r.{qn('id')} = %s AND l.{qn('token')} = %s AND l.{qn('expires_at')} > {now}"
    )
    lock = (
        f"SELECT r.{qn('pipeline')}, r.{qn('status')}, r.{qn('last_seq')}, r.{qn('head_hash')} "
        f"{fence}{lock_of}"
    )
    returning = connection.features.can_return_columns_from_insert
    insert = (
        f"INSERT INTO {event_t} ({', '.join(qn(c) for c in EVENT_COLUMNS)}) "
        f"VALUES ({', '.join(['%s'] * len(EVENT_COLUMNS))})"
    )
    returned = f" RETURNING {qn('id')}, {qn('created_at')}" if returning else ""
    update = f"UPDATE {run_t} SET {{sets}} WHERE {qn('id')} = %s"
    insert_and_update = guarded = ""
    if connection.vendor == "postgresql":
        insert_and_update = (
            f"WITH e AS ({insert}{returned}), u AS ({update}) "
            f"SELECT {qn('id')}, {qn('created_at')} FROM e"
        )
        # The JSON columns are cast: in INSERT ... SELECT an untyped literal is text, which
        # has no assignment cast to jsonb.
        selected = ", ".join(
            "%s::jsonb" if c in ("inputs", "payload", "artifacts") else "%s" for c in EVENT_COLUMNS
        )
        guarded = (
            f"WITH h AS (SELECT r.{qn('id')} {fence} AND r.{qn('last_seq')} = %s "
            f"AND r.{qn('head_hash')} = %s{lock_of}), "
            f"e AS (INSERT INTO {event_t} ({', '.join(qn(c) for c in EVENT_COLUMNS)}) "
            f"SELECT {selected} FROM h{returned}), "
            f"u AS (UPDATE {run_t} SET {{sets}} WHERE {qn('id')} = (SELECT {qn('id')} FROM h)) "
            f"SELECT {qn('id')}, {qn('created_at')} FROM e"
        )
    created = Event._meta.get_field("created_at")
    column = created.get_col(Event._meta.db_table)
    cached = _SQL_CACHE[connection.vendor] = _AppendSQL(
        now=now,
        lock=lock,
        insert=insert + returned,
        insert_and_update=insert_and_update,
        update=update,
        guarded=guarded,
        returning=returning,
        created_at=(
            column,
            connection.ops.get_db_converters(column) + created.get_db_converters(connection),
        ),
    )
    return cached


def _insert(
    connection,
    run: _Head,
    actor: str,
    token: int | None,
    type: str,
    stage: str,
    payload: dict[str, Any],
    encoded: bytes,
    artifact_uris: Sequence[str],
    idempotency_key: str,
    inputs: dict[str, Any] | None,
    status: str | None,
    run_fields: dict[str, Any],
    *,
    guarded: bool = False,
) -> Event | None:
    """Write the event and move the run's head. The caller has checked what _refusal()
    checks, and holds the run's lock, or asks for the `guarded` statement, which takes the
    lock itself and writes nothing (returns None) unless the lease is still the writer's and
    the run's head is still `run`'s."""
    sql = _sql(connection)
    qn = connection.ops.quote_name
    sets = [
        f"{qn('last_seq')} = %s",
        f"{qn('head_hash')} = %s",
        f"{qn('version')} = {qn('version')} + 1",
        f"{qn('updated_at')} = {sql.now}",
    ]
    set_params: list[Any] = []
    if status is not None:
        sets += [f"{qn('status')} = %s", f"{qn('attention')} = %s"]
        set_params += [status, Run.attention_for(status)]
    for name, value in run_fields.items():
        field = Run._meta.get_field(name)
        if isinstance(value, Now):
            sets.append(f"{qn(field.column)} = {sql.now}")
        else:
            sets.append(f"{qn(field.column)} = %s")
            set_params.append(field.get_db_prep_save(value, connection))

    seq = run.last_seq + 1
    body, payload_ref, payload_json = _place_payload(run.pk, seq, payload, encoded)
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
    # JSON columns get the canonical text the hash was computed over (the database parses
    # it; PostgreSQL casts the literal to jsonb), instead of a second, differently spaced
    # encoding.
    values = [
        run.pk,
        seq,
        stage,
        type,
        canonical_json(event.inputs),
        payload_json,
        payload_ref,
        canonical_json(event.artifacts),
        idempotency_key,
        actor,
        token,
        event.prev_hash,
        event.hash,
    ]
    update_params = [seq, event.hash, *set_params, run.pk]
    set_list = ", ".join(sets)
    with connection.cursor() as cursor:
        if guarded:
            cursor.execute(
                sql.guarded.replace("{sets}", set_list),
                [run.pk, token, run.last_seq, run.head_hash, *values, *update_params[:-1]],
            )
            row = cursor.fetchone()
            if row is None:
                return None
            event.pk, created_at = row
        elif sql.insert_and_update:
            cursor.execute(
                sql.insert_and_update.replace("{sets}", set_list), values + update_params
            )
            event.pk, created_at = cursor.fetchone()
        else:
            cursor.execute(sql.insert, values)
            if sql.returning:
                event.pk, created_at = cursor.fetchone()
            else:
                event.pk, created_at = cursor.lastrowid, None
            cursor.execute(sql.update.replace("{sets}", set_list), update_params)
    event.created_at = _from_db_created_at(created_at, sql, connection, event.pk)
    # The row exists now: the instance is what a query would have returned.
    event._state.adding = False
    event._state.db = connection.alias
    # --- Notification hook (runs/notify.py) ------------------------------------------------
    # The one line notifications add to the append path: if this event moves the run into a
    # state a human must hear about, a callback runs after the transaction commits. It never
    # raises, and touches neither the database nor Redis before the commit.
    notify.on_append(event, run.status, status)
    return event


def _from_db_created_at(value: Any, sql: _AppendSQL, connection, pk: int) -> Any:
    """Run the returned created_at through the converters the ORM would apply (SQLite
    returns text)."""
    if value is None:
        return Event.objects.values_list("created_at", flat=True).get(pk=pk)
    column, converters = sql.created_at
    for converter in converters:
        value = converter(value, column, connection)
    return value


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
        body, encoded = _encode_payload(payload)
        _insert(
            connections[DEFAULT_DB_ALIAS],
            _Head(run.pk, run.pipeline, run.status, 0, ""),
            actor,
            None,
            Event.Type.RUN_CREATED,
            "",
            body,
            encoded,
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


def record_found(writer: Writer, effect: Effect, answer: Reconciliation) -> Event:
    """The target says the effect happened and matches: confirm it with a RECONCILED event
    (the engine on its own re-check, or an approval writing down what the plan showed)."""
    return record_outcome(
        writer,
        effect,
        status=Effect.Status.CONFIRMED,
        external_id=answer.external_id,
        result=answer.result,
        cost=effect.cost,
        event_type=Event.Type.RECONCILED,
        event_payload={
            "call": effect.call_id,
            "tool": effect.tool,
            "found": True,
            "external_id": answer.external_id,
            "detail": answer.detail,
        },
    )


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

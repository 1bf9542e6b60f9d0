"""The one append path of the run ledger.

Everything that moves a run's state goes through `append()` (or a helper that calls it inside
the same transaction: effects.py, checkpoints.py, edits.py): it checks the writer's fencing
token under the run's row lock, assigns the next `seq`, chains the event's hash to its
predecessor (chain.py), and moves the run's status. What it writes is worked out in rows.py;
the SQL it runs is the vendor's (runs/ledger/sql/).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models.functions import Now

from runs import ids, signals
from runs.events import RunCreated, RunEvent
from runs.ledger import heads
from runs.ledger.deferral import Deferral, deferral_of, deferred_commit
from runs.ledger.head_checks import HeadLost, StaleRead, check_head, moved_since_read, went_back
from runs.ledger.leases import LeaseLost
from runs.ledger.rows import (
    NO_END,
    STAY,
    Head,
    LedgerError,
    NewEvent,
    RunMove,
    StageEnd,
    Writer,
    closing_event,
    event_row,
    head_after,
    head_moves,
    new_event,
    refusal,
)
from runs.ledger.sql import for_connection
from runs.ledger.sql.reading import loaded
from runs.ledger.sql.shapes import (
    EVENT_COLUMNS,
    CheckpointSeal,
    EffectWrite,
    EventRow,
    KeyTaken,
    Write,
)
from runs.models import Checkpoint, Event, Lease, Run

__all__ = [
    "HeadLost",
    "StaleRead",
    "KeyTaken",
    "LeaseLost",
    "LedgerError",
    "NewEvent",
    "RunMove",
    "Writer",
    "append",
    "check_head",
    "create_run",
    "deferred_commit",
]

# Event's fields in model order, as _write() builds its instance from what it wrote
# (test_ledger checks they are the model's).
EVENT_FIELDS = ("id", *EVENT_COLUMNS, "created_at")


def append(
    writer: Writer,
    event: RunEvent,
    *,
    move: RunMove | None = None,
    effect: EffectWrite | None = None,
    seal: CheckpointSeal | None = None,
    release: bool = False,
    then: str | None = None,
    read_head: bool = False,
    flush: bool = True,
    wait: bool = True,
) -> Event | None:
    """Append `event` (its class in runs/events.py) to the writer's run, fenced by its lease;
    `move` moves the run (its status, its stage, its ticket…). Written with it once the fence
    held: `effect`, an effect row (effects.py) whose id the event carries as `effect_pk`;
    `seal`, a VERIFIED event's checkpoint; `then`, the status a run's last stage ends it in,
    its event following this one; `release`, the lease given up. `read_head`: the head known
    was read with the lease's take; StaleRead if it moved.

    `flush=False`: a write whose loss in a database crash the protocol recovers from, as if
    the worker died just before it; its own commit does not wait for the disk (unless
    RESUMER_DEFER_FLUSH is off), a caller's transaction's commit decides (deferred_commit()).
    Raises LeaseLost (HeadLost when the head went back behind this writer's last write),
    LedgerError (not an event, an unknown stage, an illegal status move, an oversized
    payload) or KeyTaken (a claimed delivery key has an effect already), having written
    nothing.

    `wait=False` too (a tool call's outcome, a SAFE call's events): where the write is its
    own transaction and moves only the head, and the vendor can (PostgreSQL), it is sent
    without waiting for the server's answer, and None returned; a write that did not land
    is written again, or refused with LeaseLost, by the next append (_settle)."""
    new = new_event(writer.actor, writer.token, event, move or STAY)
    ends = StageEnd.of(effect, seal, release, closing_event(writer, new, then))
    connection = connections[DEFAULT_DB_ALIAS]
    _settle(connection, writer, waiting=False)  # only an answer already read: see _settle
    known = heads.known(connection.alias, writer.run_id, writer.token)
    guarded = _can_guard(connection, known, new)
    if guarded and not connection.in_atomic_block and connection.get_autocommit():
        # The common case (a tool call's event, a stage's end), its own transaction
        # (AppendSQL.write_alone): on PostgreSQL one statement, not BEGIN, it and COMMIT.
        flush = flush or not settings.RESUMER_DEFER_FLUSH
        quiet = ends == NO_END and new.status is None and not new.run_fields
        if not (wait or flush) and quiet and _send(connection, writer, known, new, effect):
            return None
        written = _write(
            connection, known, new, guarded=True, alone=True, effect=effect, ends=ends, flush=flush
        )
        if written is not None:
            _chained_past(connection, writer)
            return _appended(connection, writer, known, written, new, ends, committed=True)
        guarded = False
    if _settle(connection, writer):
        known = heads.known(connection.alias, writer.run_id, writer.token)
    deferral = deferral_of(connection, new, flush)
    return _append_locked(
        connection, writer, known, new, effect, ends, guarded, deferral, read_head=read_head
    )


@dataclass(frozen=True, slots=True)
class _Sent:
    """A write sent without waiting for its answer (append's `wait=False`): what writing it
    again takes, if its answer says it must be."""

    in_flight: Any  # the vendor's: its answer read before the connection's next statement
    writer: Writer
    known: Head  # the head it was chained to, as this process knew it
    new: NewEvent
    effect: EffectWrite | None
    row: EventRow


def _send(
    connection, writer: Writer, known: Head, new: NewEvent, effect: EffectWrite | None
) -> bool:
    """Send the guarded write of `new` without waiting (append's `wait=False`); False where
    the vendor cannot, having sent nothing. This process knows the head it leaves at once,
    as not yet committed, which the next append's guarded write chains to."""
    sql = for_connection(connection)
    if not sql.can_send(connection):
        return False  # asked first: a row built here would be built again by the write
    # Built before the last write sent is settled: while its answer is on the way.
    row, _ = event_row(known, new)
    write = Write(row, head_moves(connection, known, new, row), effect, None, False, None, False)
    if _settle(connection, writer):
        return False  # the head moved: the waited write finds where (no second in flight)
    in_flight = sql.send_guarded(connection, write)
    if in_flight is None:
        return False
    alias, token = connection.alias, writer.token
    heads.remember(alias, token, head_after(known, new, row), committed=False)

    def answered(in_flight) -> None:
        # Committed once it says it wrote, wherever its answer is read: check_head() then
        # counts on it, as on a write that waited.
        if in_flight.wrote:
            heads.committed(alias, row.run_id, token, row.seq)

    in_flight.on_answer = answered
    connection.resumer_sent = _Sent(in_flight, writer, known, new, effect, row)
    return True


def _settle(connection, writer: Writer, *, waiting: bool = True) -> bool:
    """Before this connection's next write lands: the write it sent last without waiting, if
    its answer is not that it wrote. Refused (the lease or the head moved), refused by the
    server, or lost with the connection (written, or not: the chain says), it is written
    again under the run's lock, as a refused guarded write is; LeaseLost if the writer's
    lease is gone, raised from the append that settles it, which writes nothing. Whether
    the head known moved.

    Not `waiting`, at an append's start: only an answer already read. One still on its way
    is not waited for there: the guarded write chains to the write sent, its cursor reads
    the answer just before sending, and if it was no, the guarded write is refused too (its
    head is not there) and append settles it then, before the locked path. So the server
    writes the outcome while this process builds the next intent. A lost lease is met one
    write later than if every write waited, but before anything else is done for the run:
    the next call's intent, the stage's end. A write of another writer's (a job that ended
    with it in flight) whose lease is gone is left to the run's new holder, which reconciles
    what it left in doubt, instead of refusing this writer's append."""
    sent: _Sent | None = getattr(connection, "resumer_sent", None)
    if sent is None or (sent.in_flight.pending and not waiting):
        return False
    connection.resumer_sent = None
    connection.read_answer()
    alias, row = connection.alias, sent.row
    if sent.in_flight.wrote:
        return False  # committed (its on_answer said so)
    heads.remember(alias, sent.writer.token, sent.known, True)  # as known before it was sent
    if (
        sent.in_flight.wrote is None
        and Event.objects.filter(run_id=row.run_id, seq=row.seq, hash=row.hash).exists()
    ):
        heads.remember(alias, sent.writer.token, head_after(sent.known, sent.new, row), True)
        return True
    try:
        _append_locked(
            connection, sent.writer, sent.known, sent.new, sent.effect, NO_END, False, None
        )
    except LeaseLost:
        if _same(sent.writer, writer):
            raise
    return True


def _chained_past(connection, writer: Writer) -> None:
    """A guarded write of `writer`'s landed: it chained to the head after the write this
    writer sent last, so that one is written too, whatever its answer was."""
    sent: _Sent | None = getattr(connection, "resumer_sent", None)
    if sent is not None and _same(sent.writer, writer):
        connection.resumer_sent = None


def _same(one: Writer, other: Writer) -> bool:
    return (one.run_id, one.token) == (other.run_id, other.token)


def _can_guard(connection, known: Head | None, new: NewEvent) -> bool:
    """Whether the guarded write is worth a try. This process wrote the run's last event
    under this token, so it knows the head: the guarded write then fences (token, expiry
    *and* that the head is still the one it knows) in its first statement instead of a locked
    read before it. If anything moved, it writes nothing and the locked read decides."""
    return (
        known is not None
        and for_connection(connection).guarded
        and len(new.encoded) <= settings.RESUMER_INLINE_PAYLOAD_BYTES
        and refusal(known, new) is None
    )


def _append_locked(
    connection,
    writer: Writer,
    known: Head | None,
    new: NewEvent,
    effect: EffectWrite | None,
    ends: StageEnd,
    guarded: bool,
    deferral: Deferral | None,
    *,
    read_head: bool = False,
) -> Event:
    """append() inside a transaction: the caller's, or one of its own. `guarded` when the
    writer knows the head and the guarded write is worth a try before the locked read;
    `deferral` when the caller's transaction is a deferred_commit()."""
    refused: Exception | None
    # No savepoint when nested: most appends run inside a caller's transaction (a checkpoint,
    # an HTTP tool's exchanges), and a savepoint would cost two more round trips each. What
    # append refuses it raises *after* this block, having written nothing, so a refusal never
    # poisons the caller's transaction; only a database error (which breaks it anyway) does.
    with transaction.atomic(savepoint=False):
        if guarded:
            # A deferred transaction's setting rides in the guarded write's own statement.
            flush = deferral is None or deferral.said
            written = _write(
                connection, known, new, guarded=True, effect=effect, ends=ends, flush=flush
            )
            if written is not None:
                if deferral is not None:
                    deferral.said = True
                return _appended(connection, writer, known, written, new, ends)
        # The fencing check and the row lock are one statement (see runs/ledger/sql/ for what
        # each vendor locks).
        sql = for_connection(connection)
        with sql.cursor(connection) as cursor:
            row = sql.read_head(cursor, writer.run_id, writer.token)
        if row is None:
            if Run.objects.filter(pk=writer.run_id).exists():
                refused = LeaseLost(writer.run_id, writer.token)
            else:
                refused = LedgerError(f"{ids.run_id(writer.run_id)} does not exist")
        else:
            head = Head(writer.run_id, *row)
            refused = (
                went_back(writer, known, head)
                or (moved_since_read(writer, known, head) if read_head else None)
                or refusal(head, new)
            )
            if refused is None:
                written = _write(connection, head, new, effect=effect, ends=ends)
                if written is not None:
                    if deferral is not None:
                        deferral.say()
                    return _appended(connection, writer, head, written, new, ends)
                refused = KeyTaken(f"delivery key {new.idempotency_key} has an effect already")
    raise refused


def _appended(
    connection,
    writer: Writer,
    head: Head,
    written: tuple[Event, EventRow | None],
    new: NewEvent,
    ends: StageEnd = NO_END,
    *,
    committed: bool = False,
) -> Event:
    """What follows a write of `new` (and of `ends.then`, as `written`'s row, when it
    follows): this process knows the head it left, and a stop is announced."""
    event, follower = written
    _after_append(event, head, new)
    if follower is None or ends.then is None:
        after = head_after(head, new, event, event.seq if committed else 0)
    else:
        middle = head_after(head, new, event)
        _after_append(follower, middle, ends.then)
        after = head_after(middle, ends.then, follower, follower.seq if committed else 0)
    heads.remember(connection.alias, writer.token, after, committed)
    return event


def _after_append(event: Event | EventRow, head: Head, new: NewEvent) -> None:
    """A run that stopped where a human resolves it (or waits for one at a gate), or whose
    resumed work departed from its plan, is announced once the append's transaction commits (signals.run_stopped): its plan
    is computed then, and people are told. The ledger does not know who listens."""
    if (
        new.status in Run.RESUMABLE
        or new.status == Run.Status.WAITING
        or new.run_fields.get("deviated")
    ):
        announce_stop(event, new.status, previous_status=head.status)


def announce_stop(event: Event | EventRow, status: str | None, *, previous_status: str) -> None:
    """Send signals.run_stopped for `event`'s run, which it left in `status`, once the
    transaction commits, so a rolled-back write tells nobody; `robust`, so a receiver's
    failure never undoes the stop. Also called by a ledger edit, whose facts change while the
    run waits (its status does not move)."""
    run_id, seq, event_type = event.run_id, event.seq, event.type
    transaction.on_commit(
        lambda: signals.run_stopped.send(
            sender=Run,
            run_pk=run_id,
            status=status,
            seq=seq,
            previous_status=previous_status,
            event_type=event_type,
        ),
        robust=True,
    )


def _write(
    connection,
    run: Head,
    new: NewEvent,
    *,
    guarded: bool = False,
    alone: bool = False,
    effect: EffectWrite | None = None,
    ends: StageEnd = NO_END,
    flush: bool = True,
) -> tuple[Event, EventRow | None] | None:
    """Write the event, move the run's head and write `effect`, or what ends a stage (its
    seal, the event that follows, the release). The caller has checked what refusal() checks,
    and holds the run's lock, or asks for the `guarded` write, which fences itself and
    writes nothing (returns None) unless the lease is still the writer's and the run's head
    is still `run`'s; `alone`, as its own transaction (the caller has no transaction open),
    which does not wait for the disk unless `flush` (append() passes False only then). None
    too, having written nothing, when `effect` claims a delivery key that is taken. The
    event written, and the row of the one that followed it (None without `ends.then`)."""
    sql = for_connection(connection)
    row, body = event_row(run, new)
    moves = head_moves(connection, run, new, row)
    follower = None
    if ends.then is not None:
        # The run's last event follows in the same write; the head moves past both.
        middle = head_after(run, new, row)
        follower, _ = event_row(middle, ends.then)
        moves = {**moves, **head_moves(connection, middle, ends.then, follower)}
    write = Write(row, moves, effect, ends.seal, ends.release, follower, flush)
    with sql.cursor(connection) as cursor:
        if not guarded:
            written = sql.write(cursor, write)
        elif alone:
            written = sql.write_alone(cursor, write)
        else:
            written = sql.write_guarded(cursor, write)
    if written is None:
        return None
    pk, created_at, rider = written
    # The row exists now: the instance is what a query would have returned (loaded, in
    # EVENT_FIELDS order, skips the constructor's per-field work and marks it saved). The row
    # holds the JSON columns as text; the instance holds the values the text encodes.
    event = loaded(
        Event,
        connection.alias,
        EVENT_FIELDS,
        (pk, *row, sql.created_at(created_at, connection, pk)),
    )
    event.inputs, event.payload, event.artifacts = new.inputs, body, new.artifacts
    if ends.seal is None:
        event.effect_pk = rider
    else:
        event.effect_pk, event.sealed_at = None, sql.sealed_at(rider, connection)
    return event, follower


def create_run(
    pipeline: str,
    created: RunCreated,
    *,
    actor: str,
    first_stage: str,
    parent: Run | None = None,
    branch_checkpoint: Checkpoint | None = None,
    ticket: str = "",
) -> Run:
    """Create a run pinned to `created`'s input versions, its lease row and its RUN_CREATED
    event (the only unfenced append: nobody can hold the lease of a run that does not exist
    yet)."""
    with transaction.atomic():
        run = Run.objects.create(
            pipeline=pipeline,
            inputs=created.input_versions,
            current_stage=first_stage,
            parent=parent,
            branch_checkpoint=branch_checkpoint,
            status=Run.Status.PENDING,
            attention=Run.attention_for(Run.Status.PENDING),
            ticket=ticket,
            queued_at=Now() if ticket else None,
        )
        Lease.objects.create(run=run, token=0, holder="")
        _write(
            connections[DEFAULT_DB_ALIAS],
            Head(run.pk, run.pipeline, run.status, 0, ""),
            new_event(actor, None, created),
        )
        run.refresh_from_db()
        return run

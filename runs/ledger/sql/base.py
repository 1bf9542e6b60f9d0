"""The interface every vendor's ledger SQL implements, and what the vendors share (the rows
they write are shapes.py's).

`AppendSQL` writes an event and moves the run's head in two statements, and an effect row in
a third; a vendor that can do better overrides `write_event`/`write`, and one that can fence,
check the head, insert and update at once sets `guarded` and implements `write_guarded`.
Every statement is built once per connection's vendor (in `__init__`, or on the first use of
a shape of head move), never per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

from django.db.models.functions import Now
from django.db.models.sql import Query

from runs.ledger.canonical import canonical_json
from runs.ledger.sql.reading import RowReader, convert, converters_of
from runs.ledger.sql.shapes import (
    ARTIFACT_COLUMNS,
    CHECKPOINT_COLUMNS,
    EFFECT_COLUMNS,
    EVENT_COLUMNS,
    HEAD_COLUMNS,
    JSON_COLUMNS,
    SETTLE_COLUMNS,
    EffectClaim,
    EffectSettle,
    EffectWrite,
    EventRow,
    KeyTaken,
    Moves,
    Write,
    Written,
)
from runs.models import Artifact, Checkpoint, Effect, Event, Lease, Run

__all__ = ["AppendSQL", "KeyTaken"]


class AppendSQL:
    """The append path's statements on one vendor (see the module's docstring)."""

    vendor: ClassVar[str] = ""
    # Whether write_guarded() exists: the append of a writer that knows the head, without a
    # locked read first.
    guarded: ClassVar[bool] = False
    # Whether a statement can update inside WITH and read in the same statement (the stage
    # boundary's take of a lease with the read of its run, boundary.py).
    writes_in_with: ClassVar[bool] = False

    def __init__(self, connection) -> None:
        qn = self.qn = connection.ops.quote_name
        # The head update's SET list per shape of moves, and its UPDATE per SET list (sets()).
        self._set_lists: dict[tuple[tuple[str, bool], ...], str] = {}
        self._updates: dict[str, str] = {}
        # Django's own Now() for this backend, so every clock comparison agrees with the lease
        # writes in leases.py (STATEMENT_TIMESTAMP() on PostgreSQL, STRFTIME on SQLite).
        self.now, _ = Query(Run).get_compiler(connection=connection).compile(Now())
        self.run_table, self.event_table, self.effect_table = (
            qn(model._meta.db_table) for model in (Run, Event, Effect)
        )
        self.returning = connection.features.can_return_columns_from_insert
        self._build_fence(connection)
        self._build_event_insert()
        self._build_effect_writes()
        self._build_effect_read(connection)
        self._build_stage_end(connection)

    def _build_fence(self, connection) -> None:
        qn = self.qn
        lease_t = qn(Lease._meta.db_table)
        self.lock_of = " FOR UPDATE OF r, l" if connection.features.has_select_for_update_of else ""
        self.fence = (
            f"FROM {self.run_table} r INNER JOIN {lease_t} l "
            f"ON (l.{qn(Lease._meta.pk.column)} = r.{qn('id')}) "
            f"WHERE r.{qn('id')} = %s AND l.{qn('token')} = %s "
            f"AND l.{qn('expires_at')} > {self.now}"
        )
        self.lock = (
            f"SELECT r.{qn('pipeline')}, r.{qn('status')}, r.{qn('last_seq')}, "
            f"r.{qn('head_hash')}, r.{qn('deviated')} {self.fence}{self.lock_of}"
        )

    def _build_event_insert(self) -> None:
        qn = self.qn
        self.columns = ", ".join(qn(c) for c in EVENT_COLUMNS)
        self.returned = f" RETURNING {qn('id')}, {qn('created_at')}" if self.returning else ""
        self.insert = (
            f"INSERT INTO {self.event_table} ({self.columns}) "
            f"VALUES ({', '.join(['%s'] * len(EVENT_COLUMNS))}){self.returned}"
        )

    def _build_effect_writes(self) -> None:
        qn = self.qn
        self.claim = (
            f"INSERT INTO {self.effect_table} ({', '.join(qn(c) for c in EFFECT_COLUMNS)}) "
            f"VALUES ({', '.join(self.placeholder(c) for c in EFFECT_COLUMNS)}) "
            f"ON CONFLICT ({qn('delivery_key')}) DO NOTHING RETURNING {qn('id')}"
        )
        self.settle_set = ", ".join(
            [f"{qn(c)} = {self.placeholder(c)}" for c in SETTLE_COLUMNS]
            + [f"{qn('updated_at')} = {self.now}"]
        )
        self.settle = f"UPDATE {self.effect_table} SET {self.settle_set} WHERE {qn('id')} = %s"

    def _build_effect_read(self, connection) -> None:
        # The effect a key has, read on every call that is not a first attempt (a memoized
        # re-use on resume among them), by SQL and converters found once (RowReader).
        # Compiling a queryset (or even a raw() one) for it was half of a re-use.
        self.effect = RowReader(Effect, connection, f"{self.qn('delivery_key')} = %s")
        self.created_at_column, self.created_at_converters = converters_of(
            Event._meta.get_field("created_at"), connection
        )

    def _build_stage_end(self, connection) -> None:
        # What ends a stage, riding with its last events (write()'s `seal` and `release`):
        # the artifact and checkpoint rows, and the lease given up. The release is also
        # leases.release()'s statement on its own (boundary.py); the column lists are the
        # vendors' too (postgresql.py writes the rows inside its guarded statement).
        qn = self.qn
        self.artifact_columns = ", ".join(qn(c) for c in ARTIFACT_COLUMNS)
        self.checkpoint_columns = ", ".join(qn(c) for c in CHECKPOINT_COLUMNS)
        self.artifact_insert = (
            f"INSERT INTO {qn(Artifact._meta.db_table)} ({self.artifact_columns}) "
            f"VALUES ({', '.join(['%s'] * len(ARTIFACT_COLUMNS))})"
        )
        self.seal = (
            f"INSERT INTO {qn(Checkpoint._meta.db_table)} ({self.checkpoint_columns}) "
            f"VALUES ({', '.join(self.placeholder(c) for c in CHECKPOINT_COLUMNS)}) "
            f"RETURNING {qn('created_at')}"
        )
        self.release = (
            f"UPDATE {qn(Lease._meta.db_table)} SET {qn('holder')} = '', "
            f"{qn('expires_at')} = {self.now} "
            f"WHERE {qn(Lease._meta.pk.column)} = %s AND {qn('token')} = %s"
        )
        self.checkpoint_created_at = converters_of(
            Checkpoint._meta.get_field("created_at"), connection
        )

    # --- statements ---------------------------------------------------------------------

    def cursor(self, connection) -> Any:
        """The cursor the ledger's statements run on, in a `with`: Django's, unless the
        vendor keeps one of its own (postgresql.py)."""
        return connection.cursor()

    def execute(self, cursor, sql: str, params: Sequence[Any] | None = None) -> Any:
        """Execute one of the append path's statements on Django's `cursor`; returns the
        cursor its rows are read from."""
        cursor.execute(sql, params)
        return cursor

    def first_row(self, cursor, sql: str, params: Sequence[Any]) -> tuple | None:
        """Execute a statement that returns rows; its first row, or None when none came."""
        return self.execute(cursor, sql, params).fetchone()

    def placeholder(self, column: str) -> str:
        """A parameter for `column`; JSON columns take canonical JSON text."""
        return "%s"

    def effect_params(self, fields: dict[str, Any], columns: Sequence[str]) -> list:
        """The effect's values in `columns` order. JSON goes as canonical text; the rest are
        plain str, int and Decimal values both drivers bind as they are (Django registers the
        Decimal adapter on SQLite): no per-field preparation on the hottest path."""
        return [
            canonical_json(fields[c]) if c in JSON_COLUMNS and fields[c] is not None else fields[c]
            for c in columns
        ]

    def write_effect(self, cursor, effect: EffectWrite) -> int | None:
        """The effect statement on its own, in the caller's transaction: the claimed row's id
        (None when the key is taken, having written nothing), or the settled row's."""
        if isinstance(effect, EffectClaim):
            row = self.first_row(
                cursor, self.claim, self.effect_params(effect.fields, EFFECT_COLUMNS)
            )
            return row[0] if row else None
        self.execute(
            cursor, self.settle, [*self.effect_params(effect.fields, SETTLE_COLUMNS), effect.pk]
        )
        return effect.pk

    def sets(self, moves: Moves) -> tuple[str, list[Any]]:
        """The SET list of the head update and its parameters. Every append also bumps the
        run's version (approvals compare-and-set on it); one that moves more than the head
        (status, stage, ticket...) stamps updated_at. The SQL is built once per shape of
        moves (which columns, which of them take the clock)."""
        shape = tuple((column, isinstance(value, Now)) for column, value in moves.items())
        set_list = self._set_lists.get(shape)
        if set_list is None:
            qn = self.qn
            sets = [f"{qn('version')} = {qn('version')} + 1"]
            # updated_at says when the run's state last changed, and orders the inbox
            # (run_inbox_idx, run_status_idx). Stamped on every event, it rewrote both
            # indexes on every tool call (on SQLite two more pages in each commit, on
            # PostgreSQL no HOT update and seven index entries), and a busy run's row moved
            # under the operator reading the inbox.
            if any(column not in HEAD_COLUMNS for column, _ in shape):
                sets.append(f"{qn('updated_at')} = {self.now}")
            sets += [f"{qn(column)} = {self.now if clock else '%s'}" for column, clock in shape]
            set_list = self._set_lists[shape] = ", ".join(sets)
        return set_list, [value for value in moves.values() if not isinstance(value, Now)]

    def update(self, set_list: str) -> str:
        return f"UPDATE {self.run_table} SET {set_list} WHERE {self.qn('id')} = %s"

    # --- what the append path calls -----------------------------------------------------

    def read_head(self, cursor, run_id: int, token: int) -> tuple[str, str, int, str, bool] | None:
        """Fence and lock in one statement: the run's (pipeline, status, last_seq, head_hash,
        deviated) if `token` still holds an unexpired lease on it, else None."""
        return self.first_row(cursor, self.lock, [run_id, token])

    def move_head(self, cursor, moves: Moves, run_id: int) -> None:
        """The run's head update, its own statement (the vendors that can fold it into the
        insert do)."""
        set_list, params = self.sets(moves)
        sql = self._updates.get(set_list)
        if sql is None:
            sql = self._updates[set_list] = self.update(set_list)
        self.execute(cursor, sql, [*params, run_id])

    def write_event(self, cursor, row: EventRow, moves: Moves) -> tuple[int, Any]:
        """Insert the event row and move its run's head; its id and created_at as the
        database returned them (None when it cannot return it)."""
        if self.returning:
            pk, created_at = self.first_row(cursor, self.insert, row)
        else:
            pk, created_at = self.execute(cursor, self.insert, row).lastrowid, None
        self.move_head(cursor, moves, row.run_id)
        return pk, created_at

    def write(self, cursor, write: Write) -> Written | None:
        """Write the event (write_event) and what rides with it (Write); the caller holds the
        run's lock. None, having written nothing, when an EffectClaim's key is taken."""
        rider = None
        if isinstance(write.effect, EffectClaim):
            # The claim first: a taken key must leave no event behind.
            rider = self.write_effect(cursor, write.effect)
            if rider is None:
                return None
        pk, created_at = self.write_event(cursor, write.row, write.moves)
        if write.then is not None:
            self.write_follower(cursor, write.then)
        if isinstance(write.effect, EffectSettle):
            rider = self.write_effect(cursor, write.effect)
        if write.seal is not None or write.release:
            rider = self.end_stage(cursor, write)
        return pk, created_at, rider

    def write_follower(self, cursor, row: EventRow) -> None:
        """Insert the event that follows another in the same write; the head update that
        went with the first moved the head past it already."""
        if self.returning:
            self.first_row(cursor, self.insert, row)
        else:
            self.execute(cursor, self.insert, row)

    def end_stage(self, cursor, write: Write) -> Any:
        """After the write's event, in its transaction: the artifact rows and the checkpoint
        sealed on it, and the lease given up. The checkpoint's created_at as the database
        returned it (None without a seal)."""
        created_at, row = None, write.row
        if write.seal is not None:
            for artifact in write.seal.artifacts:
                self.execute(cursor, self.artifact_insert, list(artifact))
            (created_at,) = self.first_row(cursor, self.seal, write.seal.checkpoint_params(row))
        if write.release:
            self.execute(cursor, self.release, [row.run_id, row.token])
        return created_at

    def write_guarded(self, cursor, write: Write) -> Written | None:
        """write() for a writer that knows the head and holds no lock: fence (the row's token
        and its expiry) and check that the head is still the one the row chains to (guard())
        in the first statement; None, having written nothing, when anything moved or a
        claimed key is taken (the caller then takes the locked path, which tells the two
        apart). What rides with the event is written only once the fence held. Only vendors
        with `guarded` have it. Inside a caller's transaction, `flush=False` says so of the
        whole transaction (append's deferred_commit())."""
        raise NotImplementedError(f"{self.vendor} has no guarded append")

    def write_alone(self, cursor, write: Write) -> Written | None:
        """write_guarded() as its own transaction, for a caller in autocommit (no atomic()
        open): Django's transaction bookkeeping costs more than the append's own work. This
        base is for a vendor whose guarded write is one statement: in autocommit that
        statement is its own transaction, one round trip instead of BEGIN, it and COMMIT.

        A vendor whose commits do not wait for the disk ignores the write's `flush`."""
        return self.write_guarded(cursor, write)

    def can_send(self, connection) -> bool:
        """Whether send_guarded() can send on this connection: asked before the write is
        built, so a vendor that cannot (SQLite) does not chain and hash a row twice."""
        return False

    def send_guarded(self, connection, write: Write) -> Any:
        """write_alone() sent without waiting for the server's answer, on a connection
        can_send() said yes of; the connection reads the answer before its next statement:
        the in-flight statement (whose `answer` says what it came to once read), or None
        where the connection would not send it now (nothing was sent)."""
        raise NotImplementedError(f"{self.vendor} cannot send a write unanswered")

    def defer_flush(self, cursor) -> None:
        """Let the open transaction's commit return before it reaches the disk, for a
        deferred_commit() whose append could not say so in its own statement. A vendor
        whose every commit already returns before the disk flush does nothing."""

    def deferring(self, connection) -> AbstractContextManager:
        """Around a transaction that need not wait for the disk, entered before it begins
        and left once it has ended: where a vendor can say so only outside a transaction
        (sqlite.py), it says it here. Nothing by default."""
        return nullcontext()

    def read_effect(self, cursor, connection, key: str) -> Effect | None:
        """The effect holding `key`, as a query would have returned it, or None."""
        row = self.first_row(cursor, self.effect.sql, [key])
        return None if row is None else self.effect.instance(row, connection)

    def created_at(self, value: Any, connection, pk: int) -> Any:
        """The returned created_at run through the converters the ORM would apply (SQLite
        returns text); read back when the insert could not return it."""
        if value is None:
            return Event.objects.values_list("created_at", flat=True).get(pk=pk)
        return convert(value, self.created_at_column, self.created_at_converters, connection)

    def sealed_at(self, value: Any, connection) -> Any:
        """A sealed checkpoint's created_at as a query would read it (SQLite returns text)."""
        return convert(value, *self.checkpoint_created_at, connection)

    # --- maintenance --------------------------------------------------------------------

    def set_ledger(self, connection, on: bool) -> None:
        """Say (on) that this connection's next effect writes are the ledger's own, which
        the effect rows' trigger lets through (migration 0014), or stop saying it (off)."""
        raise NotImplementedError

    def set_maintenance(self, connection, on: bool) -> None:
        """Lift (on) or restore (off) the append-only triggers for this connection only."""
        raise NotImplementedError

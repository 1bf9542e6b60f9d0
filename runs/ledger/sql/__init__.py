"""The ledger's SQL on each database vendor: one class per vendor behind one interface.

The append path is the hottest code in Resumer (every tool call writes two events), so its
statements are written once per vendor in SQL instead of being compiled by the ORM on every
call. On PostgreSQL, where each statement is a round trip, the event insert and the run head
update are one statement, and a writer that knows the head (it wrote the last event) locks,
fences, inserts and updates in a single one. bench/ledger_append.py measures what this buys.

An effect's intent and its outcome ride with their event (EffectClaim, EffectSettle): the
effect row is written in the event's transaction on SQLite and in the event's very statement
on PostgreSQL, so a durable tool call is two writes, as a SAFE call is. bench/tool_call.py
measures the call.

`for_connection(connection)` returns the vendor's instance, built once per vendor. The same
classes say how `maintenance()` lifts the append-only triggers on one connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.utils import CursorDebugWrapper
from django.db.models.functions import Now
from django.db.models.sql import Query

from runs.ledger.chain import canonical_json
from runs.models import Effect, Event, Lease, Run

__all__ = [
    "EVENT_COLUMNS",
    "AppendSQL",
    "EffectClaim",
    "EffectSettle",
    "PostgreSQLAppend",
    "SQLiteAppend",
    "for_connection",
]

# The event row as every insert writes it; `row` arguments below come in this order.
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

# Head moves: run column -> value, or Now() for the database clock.
Moves = dict[str, Any]
# What a write returns: the event's id and created_at (as the database returned it, None when
# it cannot), and the effect's id (None without an effect).
Written = tuple[int, Any, int | None]

# A new effect row (its intent), in this order; created_at and updated_at are the database's.
EFFECT_COLUMNS = (
    "delivery_key",
    "run_id",
    "stage",
    "call_id",
    "tool",
    "policy",
    "target",
    "request_hash",
    "request",
    "status",
    "external_id",
    "result",
    "error",
    "attempts",
    "cost",
)
# What an outcome sets on an effect row, in this order.
SETTLE_COLUMNS = ("status", "external_id", "result", "error", "cost")
JSON_COLUMNS = frozenset({"inputs", "payload", "artifacts", "request", "result"})
# What every append moves; an append that moves only these leaves the run's updated_at.
HEAD_COLUMNS = frozenset({"last_seq", "head_hash", "head_anchor"})


@dataclass(frozen=True, slots=True)
class EffectClaim:
    """An effect's intent, claiming its delivery key: written with its event, or neither is
    (the key is taken: the caller reads the existing effect and decides what to do)."""

    fields: dict[str, Any]  # EFFECT_COLUMNS by name, Python values


@dataclass(frozen=True, slots=True)
class EffectSettle:
    """An effect's outcome, written with its event."""

    pk: int
    fields: dict[str, Any]  # SETTLE_COLUMNS by name, Python values


EffectWrite = EffectClaim | EffectSettle


class KeyTaken(Exception):
    """The claimed delivery key has an effect already: nothing was written."""


class AppendSQL:
    """The append path's statements on one vendor. This base writes an event and moves the
    run's head in two statements; a vendor that can do better overrides `write`, and one that
    can fence, check the head, insert and update in one statement sets `guarded`."""

    vendor: ClassVar[str] = ""
    # Whether write_guarded() exists: the append of a writer that knows the head, without a
    # locked read first.
    guarded: ClassVar[bool] = False

    def __init__(self, connection) -> None:
        qn = self.qn = connection.ops.quote_name
        self._set_lists: dict[tuple[tuple[str, bool], ...], str] = {}
        # Django's own Now() for this backend, so every clock comparison agrees with the lease
        # writes in leases.py (STATEMENT_TIMESTAMP() on PostgreSQL, STRFTIME on SQLite).
        self.now, _ = Query(Run).get_compiler(connection=connection).compile(Now())
        run_t, lease_t, event_t = (qn(m._meta.db_table) for m in (Run, Lease, Event))
        self.run_table, self.event_table = run_t, event_t
        self.lock_of = " FOR UPDATE OF r, l" if connection.features.has_select_for_update_of else ""
        self.fence = (
            f"FROM {run_t} r INNER JOIN {lease_t} l ON (l.{qn(Lease._meta.pk.column)} = r.{qn('id')}) "
            f"WHERE r.{qn('id')} = %s AND l.{qn('token')} = %s AND l.{qn('expires_at')} > {self.now}"
        )
        self.lock = (
            f"SELECT r.{qn('pipeline')}, r.{qn('status')}, r.{qn('last_seq')}, r.{qn('head_hash')}, "
            f"r.{qn('deviated')} {self.fence}{self.lock_of}"
        )
        self.returning = connection.features.can_return_columns_from_insert
        self.columns = ", ".join(qn(c) for c in EVENT_COLUMNS)
        self.returned = f" RETURNING {qn('id')}, {qn('created_at')}" if self.returning else ""
        self.insert = (
            f"INSERT INTO {event_t} ({self.columns}) "
            f"VALUES ({', '.join(['%s'] * len(EVENT_COLUMNS))}){self.returned}"
        )
        effect_t = self.effect_table = qn(Effect._meta.db_table)
        self.claim = (
            f"INSERT INTO {effect_t} ({', '.join(qn(c) for c in EFFECT_COLUMNS)}) "
            f"VALUES ({', '.join(self.placeholder(c) for c in EFFECT_COLUMNS)}) "
            f"ON CONFLICT ({qn('delivery_key')}) DO NOTHING RETURNING {qn('id')}"
        )
        self.settle_set = ", ".join(
            [f"{qn(c)} = {self.placeholder(c)}" for c in SETTLE_COLUMNS]
            + [f"{qn('updated_at')} = {self.now}"]
        )
        self.settle = f"UPDATE {effect_t} SET {self.settle_set} WHERE {qn('id')} = %s"
        # The effect a key has, read on every call that is not a first attempt (a memoized
        # re-use on resume among them): its columns in model order, each through the
        # converters the ORM would apply, computed once here. Compiling a queryset (or even
        # a raw() one) for it was half of a re-use.
        fields = Effect._meta.concrete_fields
        self.effect_fields = tuple(field.attname for field in fields)
        self.find_effect = (
            f"SELECT {', '.join(qn(field.column) for field in fields)} FROM {effect_t} "
            f"WHERE {qn('delivery_key')} = %s"
        )
        read = [(i, *_converters(field, connection)) for i, field in enumerate(fields)]
        self.effect_converters = [(i, column, fns) for i, column, fns in read if fns]
        self.created_at_column, self.created_at_converters = _converters(
            Event._meta.get_field("created_at"), connection
        )

    # --- statements ---------------------------------------------------------------------

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
        self.execute(cursor, self.update(set_list), [*params, run_id])

    def write_event(self, cursor, row: Sequence[Any], moves: Moves, run_id: int) -> tuple[int, Any]:
        """Insert the event row and move the run's head; its id and created_at as the
        database returned them (None when it cannot return it)."""
        if self.returning:
            pk, created_at = self.first_row(cursor, self.insert, row)
        else:
            pk, created_at = self.execute(cursor, self.insert, row).lastrowid, None
        self.move_head(cursor, moves, run_id)
        return pk, created_at

    def write(
        self,
        cursor,
        row: Sequence[Any],
        moves: Moves,
        run_id: int,
        effect: EffectWrite | None = None,
    ) -> Written | None:
        """Write the event (write_event) and `effect`; the caller holds the run's lock. None,
        having written nothing, when an EffectClaim's key is taken."""
        effect_pk = None
        if isinstance(effect, EffectClaim):
            # The claim first: a taken key must leave no event behind.
            effect_pk = self.write_effect(cursor, effect)
            if effect_pk is None:
                return None
        pk, created_at = self.write_event(cursor, row, moves, run_id)
        if isinstance(effect, EffectSettle):
            effect_pk = self.write_effect(cursor, effect)
        return pk, created_at, effect_pk

    def write_guarded(
        self,
        cursor,
        row: Sequence[Any],
        moves: Moves,
        run_id: int,
        *,
        token: int,
        last_seq: int,
        head_hash: str,
        effect: EffectWrite | None = None,
        flush: bool = True,
    ) -> Written | None:
        """write() for a writer that knows the head and holds no lock: fence (token and
        expiry) and check that the head is still (last_seq, head_hash) in the first statement;
        None, having written nothing, when anything moved or a claimed key is taken (the
        caller then takes the locked path, which tells the two apart). Only vendors with
        `guarded` have it. `flush` as in write_alone(), which alone passes False: inside a
        caller's transaction, the caller's commit decides."""
        raise NotImplementedError(f"{self.vendor} has no guarded append")

    def write_alone(self, cursor, *args: Any, flush: bool = True, **kwargs: Any) -> Written | None:
        """write_guarded() as its own transaction, for a caller in autocommit (no atomic()
        open): Django's transaction bookkeeping costs more than the append's own work. This
        base is for a vendor whose guarded write is one statement: in autocommit that
        statement is its own transaction, one round trip instead of BEGIN, it and COMMIT.

        `flush=False`: the commit may return before it reaches the disk (append() says which
        writes may). A vendor whose every commit already returns before the disk flush
        ignores it."""
        return self.write_guarded(cursor, *args, flush=flush, **kwargs)

    def read_effect(self, cursor, connection, key: str) -> list[Any] | None:
        """The values of the effect holding `key`, in `effect_fields` order and converted as
        a query would (for Effect.from_db), or None."""
        row = self.first_row(cursor, self.find_effect, [key])
        if row is None:
            return None
        values = list(row)
        for i, column, converters in self.effect_converters:
            values[i] = _convert(values[i], column, converters, connection)
        return values

    def created_at(self, value: Any, connection, pk: int) -> Any:
        """The returned created_at run through the converters the ORM would apply (SQLite
        returns text); read back when the insert could not return it."""
        if value is None:
            return Event.objects.values_list("created_at", flat=True).get(pk=pk)
        return _convert(value, self.created_at_column, self.created_at_converters, connection)

    # --- maintenance --------------------------------------------------------------------

    def set_maintenance(self, connection, on: bool) -> None:
        """Lift (on) or restore (off) the append-only triggers for this connection only."""
        raise NotImplementedError


class SQLiteAppend(AppendSQL):
    """SQLite: the IMMEDIATE transaction already holds the database's write lock, so nothing
    can move between statements: the guarded append checks the fence and the head in its
    first write (an INSERT ... SELECT ... WHERE EXISTS) instead of a read before it."""

    vendor = "sqlite"
    guarded = True

    def __init__(self, connection) -> None:
        super().__init__(connection)
        # Each statement of run() as the driver takes it (? for %s), rewritten once: a
        # bounded set, one per statement and shape of head move (sets()).
        self._qmark: dict[str, str] = {}
        qn = self.qn
        guard = (
            f"WHERE EXISTS (SELECT 1 {self.fence} AND r.{qn('last_seq')} = %s "
            f"AND r.{qn('head_hash')} = %s)"
        )
        self.guarded_event = (
            f"INSERT INTO {self.event_table} ({self.columns}) "
            f"SELECT {', '.join(['%s'] * len(EVENT_COLUMNS))} {guard}{self.returned}"
        )
        self.guarded_claim = (
            f"INSERT INTO {self.effect_table} ({', '.join(qn(c) for c in EFFECT_COLUMNS)}) "
            f"SELECT {', '.join(['%s'] * len(EFFECT_COLUMNS))} {guard} "
            f"ON CONFLICT ({qn('delivery_key')}) DO NOTHING RETURNING {qn('id')}"
        )

    def execute(self, cursor, sql: str, params: Sequence[Any] | None = None) -> Any:
        # Django's SQLite cursor rewrites every statement's %s to ? with a regular expression
        # on each execution, under three layers of wrappers: on these long statements that
        # was a sixth of a tool call's time (bench/tool_call.py --profile). The append path's
        # statements are a fixed set, so each is rewritten once (by Django's own
        # convert_query) and executed on the driver's cursor, its errors still translated
        # as Django's are. A connection someone observes (execute_wrapper, DEBUG's query log,
        # assertNumQueries) takes Django's path, so it sees every statement there is. Django
        # hands out a debug cursor exactly when queries are logged as it is made; asking
        # queries_logged instead reads the settings again on every statement.
        db = cursor.db
        if db.execute_wrappers or isinstance(cursor, CursorDebugWrapper):
            return super().execute(cursor, sql, params)
        db.validate_no_broken_transaction()
        driver = cursor.cursor
        with db.wrap_database_errors:
            if params is None:
                sqlite3.Cursor.execute(driver, sql)
            else:
                qmark = self._qmark.get(sql)
                if qmark is None:
                    qmark = self._qmark[sql] = driver.convert_query(sql)
                sqlite3.Cursor.execute(driver, qmark, params)
        return driver

    def write_guarded(
        self,
        cursor,
        row: Sequence[Any],
        moves: Moves,
        run_id: int,
        *,
        token: int,
        last_seq: int,
        head_hash: str,
        effect: EffectWrite | None = None,
        flush: bool = True,
    ) -> Written | None:
        guard = [run_id, token, last_seq, head_hash]
        if isinstance(effect, EffectClaim):
            params = self.effect_params(effect.fields, EFFECT_COLUMNS)
            claimed = self.first_row(cursor, self.guarded_claim, [*params, *guard])
            if claimed is None:
                return None
            # The fence held for the claim, and this IMMEDIATE transaction holds the write
            # lock: the event goes in as any locked write's does.
            return (*self.write_event(cursor, row, moves, run_id), claimed[0])
        written = self.first_row(cursor, self.guarded_event, [*row, *guard])
        if written is None:
            return None
        self.move_head(cursor, moves, run_id)
        effect_pk = self.write_effect(cursor, effect) if isinstance(effect, EffectSettle) else None
        return written[0], written[1], effect_pk

    def write_alone(self, cursor, *args: Any, flush: bool = True, **kwargs: Any) -> Written | None:
        # Two or three statements: their own IMMEDIATE transaction, taken on the raw cursor
        # (the connection is in autocommit, so the driver adds nothing of its own). A stale
        # head wrote nothing and rolls back; so does anything that raises. `flush` changes
        # nothing here: the settings run SQLite's WAL with synchronous=NORMAL, under which no
        # commit waits for the disk (docs/deploy.md says why production is PostgreSQL).
        self.execute(cursor, "BEGIN IMMEDIATE")
        try:
            written = self.write_guarded(cursor, *args, **kwargs)
        except BaseException:
            self.execute(cursor, "ROLLBACK")
            raise
        self.execute(cursor, "COMMIT" if written is not None else "ROLLBACK")
        return written

    def set_maintenance(self, connection, on: bool) -> None:
        # The triggers call resumer_maintenance(), which reads this flag (runs/apps.py).
        connection._resumer_maintenance = on


class PostgreSQLAppend(AppendSQL):
    """PostgreSQL: the fence locks the run row (serialising appends to the run) *and* the
    lease row, so a takeover that commits while a write waits for the lock is re-checked
    against the lease's newest version. Insert, head update and the effect's row are one
    statement; the guarded one also locks and fences, so it runs in autocommit."""

    vendor = "postgresql"
    guarded = True

    def placeholder(self, column: str) -> str:
        # In INSERT ... SELECT an untyped literal is text, which has no assignment cast to
        # jsonb.
        return "%s::jsonb" if column in JSON_COLUMNS else "%s"

    def __init__(self, connection) -> None:
        super().__init__(connection)
        qn = self.qn
        run_t, effect_t = self.run_table, self.effect_table
        selected = ", ".join(self.placeholder(c) for c in EVENT_COLUMNS)
        effect_selected = ", ".join(self.placeholder(c) for c in EFFECT_COLUMNS)
        effect_columns = ", ".join(qn(c) for c in EFFECT_COLUMNS)
        pk = qn("id")
        # One per kind of effect the event carries, each in two forms: {head} is the locked,
        # fenced head h, and {sets} the head update's SET list. Every part writes only when h
        # (and, for a claim, the claimed row x) has a row, so a stale head or a taken key
        # writes nothing at all.
        templates = {
            None: (
                "WITH {head}, "
                f"e AS (INSERT INTO {self.event_table} ({self.columns}) "
                f"SELECT {selected} FROM h{self.returned}), "
                f"u AS (UPDATE {run_t} SET {{sets}} WHERE {pk} = (SELECT {pk} FROM h)) "
                f"SELECT {pk}, {qn('created_at')}, NULL FROM e"
            ),
            EffectClaim: (
                "WITH {head}, "
                f"x AS (INSERT INTO {effect_t} ({effect_columns}) SELECT {effect_selected} "
                f"FROM h ON CONFLICT ({qn('delivery_key')}) DO NOTHING RETURNING {pk}), "
                f"e AS (INSERT INTO {self.event_table} ({self.columns}) "
                f"SELECT {selected} FROM x{self.returned}), "
                f"u AS (UPDATE {run_t} SET {{sets}} WHERE {pk} = (SELECT {pk} FROM h) "
                f"AND EXISTS (SELECT 1 FROM x)) "
                f"SELECT e.{pk}, e.{qn('created_at')}, x.{pk} FROM e, x"
            ),
            EffectSettle: (
                "WITH {head}, "
                f"e AS (INSERT INTO {self.event_table} ({self.columns}) "
                f"SELECT {selected} FROM h{self.returned}), "
                f"u AS (UPDATE {run_t} SET {{sets}} WHERE {pk} = (SELECT {pk} FROM h)), "
                f"x AS (UPDATE {effect_t} SET {self.settle_set} WHERE {pk} = %s "
                f"AND EXISTS (SELECT 1 FROM h) RETURNING {pk}) "
                f"SELECT e.{pk}, e.{qn('created_at')}, (SELECT {pk} FROM x) FROM e"
            ),
        }
        head = (
            f"h AS (SELECT r.{pk}{{defer}} {self.fence} AND r.{qn('last_seq')} = %s "
            f"AND r.{qn('head_hash')} = %s{self.lock_of})"
        )
        # A write that need not reach the disk before it returns (flush=False) turns off
        # synchronous_commit for its own transaction, the statement, and no other: set_config
        # with is_local, evaluated in h, where it runs only once the fence held. PostgreSQL
        # writes WAL in order, so the next flushed commit (an intent, a checkpoint) carries
        # it to the disk too: a database crash can lose only a tail of such writes, never one
        # from before a flushed write, and leaves the database as if they had rolled back.
        defer = ", set_config('synchronous_commit', 'off', true)"
        self.guarded_templates = {
            (kind, flush): template.replace(
                "{head}", head.replace("{defer}", "" if flush else defer)
            )
            for kind, template in templates.items()
            for flush in (True, False)
        }
        self.insert_and_update = (
            f"WITH e AS ({self.insert}), u AS ({self.update('{sets}')}) "
            f"SELECT {pk}, {qn('created_at')} FROM e"
        )

    def write_event(self, cursor, row: Sequence[Any], moves: Moves, run_id: int) -> tuple[int, Any]:
        set_list, params = self.sets(moves)
        return self.first_row(
            cursor, self.insert_and_update.replace("{sets}", set_list), [*row, *params, run_id]
        )

    def write_guarded(
        self,
        cursor,
        row: Sequence[Any],
        moves: Moves,
        run_id: int,
        *,
        token: int,
        last_seq: int,
        head_hash: str,
        effect: EffectWrite | None = None,
        flush: bool = True,
    ) -> Written | None:
        set_list, params = self.sets(moves)
        sql = self.guarded_templates[type(effect) if effect is not None else None, flush]
        guard = [run_id, token, last_seq, head_hash]
        if isinstance(effect, EffectClaim):
            claim = self.effect_params(effect.fields, EFFECT_COLUMNS)
            values = [*guard, *claim, *row, *params]
        elif isinstance(effect, EffectSettle):
            settle = self.effect_params(effect.fields, SETTLE_COLUMNS)
            values = [*guard, *row, *params, *settle, effect.pk]
        else:
            values = [*guard, *row, *params]
        return self.first_row(cursor, sql.replace("{sets}", set_list), values)

    def set_maintenance(self, connection, on: bool) -> None:
        # A session setting the trigger function reads (migration 0002); other sessions
        # keep theirs.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('resumer.maintenance', %s, false)", ["on" if on else "off"]
            )


def _converters(field, connection) -> tuple[Any, list]:
    """A model field's column expression and the converters a query applies to its values
    on this connection (the backend's, then the field's own)."""
    column = field.get_col(field.model._meta.db_table)
    return column, connection.ops.get_db_converters(column) + field.get_db_converters(connection)


def _convert(value: Any, column, converters: list, connection) -> Any:
    """A value read from the database through `_converters`' list, as a query applies it."""
    for converter in converters:
        value = converter(value, column, connection)
    return value


VENDORS: dict[str, type[AppendSQL]] = {"sqlite": SQLiteAppend, "postgresql": PostgreSQLAppend}
_built: dict[str, AppendSQL] = {}


def for_connection(connection) -> AppendSQL:
    """The ledger's SQL for this connection's vendor (built on first use, then shared)."""
    built = _built.get(connection.vendor)
    if built is None:
        vendor = VENDORS.get(connection.vendor)
        if vendor is None:
            raise ImproperlyConfigured(
                f"Resumer supports SQLite and PostgreSQL, not {connection.vendor}"
            )
        built = _built[connection.vendor] = vendor(connection)
    return built

"""The ledger's SQL on SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from django.db.backends.utils import CursorDebugWrapper

from runs.ledger.sql.base import AppendSQL
from runs.ledger.sql.driver import kept_cursor
from runs.ledger.sql.shapes import (
    EFFECT_COLUMNS,
    EVENT_COLUMNS,
    EffectClaim,
    EffectSettle,
    EffectWrite,
    Write,
    Written,
    guard,
)

__all__ = ["SQLiteAppend"]

# PRAGMA synchronous by level (1 NORMAL, 2 FULL, 3 EXTRA), each statement written once.
SYNCHRONOUS = {level: f"PRAGMA synchronous={level}" for level in (1, 2, 3)}


class SQLiteAppend(AppendSQL):
    """SQLite: the IMMEDIATE transaction already holds the database's write lock, so nothing
    can move between statements: the guarded append checks the fence and the head in its
    first write (an INSERT ... SELECT ... WHERE EXISTS) instead of a read before it."""

    vendor = "sqlite"
    guarded = True

    def __init__(self, connection) -> None:
        super().__init__(connection)
        # Each of the append path's statements as the driver takes it (? for %s), rewritten
        # once: a bounded set, one per statement and shape of head move (sets()).
        self._qmark: dict[str, str] = {}
        qn = self.qn
        head_is = (
            f"WHERE EXISTS (SELECT 1 {self.fence} AND r.{qn('last_seq')} = %s "
            f"AND r.{qn('head_hash')} = %s)"
        )
        self.guarded_event = (
            f"INSERT INTO {self.event_table} ({self.columns}) "
            f"SELECT {', '.join(['%s'] * len(EVENT_COLUMNS))} {head_is}{self.returned}"
        )
        self.guarded_claim = (
            f"INSERT INTO {self.effect_table} ({', '.join(qn(c) for c in EFFECT_COLUMNS)}) "
            f"SELECT {', '.join(['%s'] * len(EFFECT_COLUMNS))} {head_is} "
            f"ON CONFLICT ({qn('delivery_key')}) DO NOTHING RETURNING {qn('id')}"
        )

    def cursor(self, connection) -> Any:
        # Django's cursor, made once per database connection and kept open, where nobody
        # observes the connection: a new one for each append (its driver cursor and two
        # wrappers) cost more than one of the statements it runs. An observed connection
        # gets a new one, so its wrappers see every statement.
        return kept_cursor(connection, lambda db, raw: _Kept(db))

    def execute(self, cursor, sql: str, params: Sequence[Any] | None = None) -> Any:
        # Django's SQLite cursor rewrites every statement's %s to ? with a regular expression
        # on each execution, under three layers of wrappers, which on these long statements
        # is a large share of a tool call (bench/tool_call.py --profile shows it). The append
        # path's statements are a fixed set, so each is rewritten once (by Django's own
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
        try:
            if params is None:
                sqlite3.Cursor.execute(driver, sql)
            else:
                qmark = self._qmark.get(sql)
                if qmark is None:
                    qmark = self._qmark[sql] = driver.convert_query(sql)
                sqlite3.Cursor.execute(driver, qmark, params)
        except Exception:
            # Translated as Django's cursor translates it, entered only when one was raised.
            with db.wrap_database_errors:
                raise
        return driver

    def write_guarded(self, cursor, write: Write) -> Written | None:
        row, effect = write.row, write.effect
        fence = guard(row)
        if isinstance(effect, EffectClaim):
            params = self.effect_params(effect.fields, EFFECT_COLUMNS)
            cursor.db._resumer_ledger = True
            try:
                claimed = self.first_row(cursor, self.guarded_claim, [*params, *fence])
            finally:
                cursor.db._resumer_ledger = False
            if claimed is None:
                return None
            # The fence held for the claim, and this IMMEDIATE transaction holds the write
            # lock: the event goes in as any locked write's does.
            return (*self.write_event(cursor, row, write.moves), claimed[0])
        written = self.first_row(cursor, self.guarded_event, [*row, *fence])
        if written is None:
            return None
        self.move_head(cursor, write.moves, row.run_id)
        if write.then is not None:
            self.write_follower(cursor, write.then)
        if write.seal is not None or write.release:
            # In the same IMMEDIATE transaction: the stage's end is one commit.
            return written[0], written[1], self.end_stage(cursor, write)
        effect_pk = self.write_effect(cursor, effect) if isinstance(effect, EffectSettle) else None
        return written[0], written[1], effect_pk

    def write_alone(self, cursor, write: Write) -> Written | None:
        # Two to four statements: their own IMMEDIATE transaction, taken on the raw cursor
        # (the connection is in autocommit, so the driver adds nothing of its own). A stale
        # head wrote nothing and rolls back; so does anything that raises. A write that need
        # not wait for the disk commits at NORMAL on a connection whose commits wait (FULL).
        with self.deferring(cursor.db) if not write.flush else nullcontext():
            self.execute(cursor, "BEGIN IMMEDIATE")
            try:
                written = self.write_guarded(cursor, write)
            except BaseException:
                self.execute(cursor, "ROLLBACK")
                raise
            self.execute(cursor, "COMMIT" if written is not None else "ROLLBACK")
        return written

    @contextmanager
    def deferring(self, connection) -> Iterator[None]:
        # SQLite takes its safety level only outside a transaction, so the transaction is
        # wrapped: NORMAL (the WAL written, not flushed) until it has ended, then the
        # connection's own level again. In WAL mode a commit that waits flushes every frame
        # before its own, and recovery keeps a prefix of the WAL: a power loss takes only a
        # tail of such writes, never one from before a write that waited, as on PostgreSQL.
        # Nothing at all where no commit waits (NORMAL, the default): no statement more.
        level = self.waiting_level(connection)
        if not level:
            yield
            return
        raw = connection.connection
        self._synchronous(connection, raw, 1)
        try:
            yield
        finally:
            if connection.connection is raw:  # not a connection that died meanwhile
                self._synchronous(connection, raw, level)

    def _synchronous(self, connection, raw, level: int) -> None:
        if connection.execute_wrappers or connection.queries_logged:
            # Observed (as execute() decides): through Django's cursor, seen as every
            # statement of the append path is.
            with connection.cursor() as cursor:
                cursor.execute(SYNCHRONOUS[level])
            return
        # On the driver's connection: a PRAGMA returns no row, and a Django cursor made for
        # each of the two cost a tenth of the disk flush it saves (bench/peers_call.py, FULL).
        raw.execute(SYNCHRONOUS[level])

    def waiting_level(self, connection) -> int:
        """The connection's `PRAGMA synchronous` if its commits wait for the disk (2, FULL;
        3, EXTRA), else 0: read once per database connection, which settings.py's
        RESUMER_SQLITE_SYNCHRONOUS set as it connected."""
        connection.ensure_connection()
        raw = connection.connection
        known = getattr(connection, "_resumer_synchronous", None)
        if known is None or known[0] is not raw:
            (level,) = raw.execute("PRAGMA synchronous").fetchone()
            known = connection._resumer_synchronous = (raw, level)
        return known[1] if known[1] >= 2 else 0

    def write_effect(self, cursor, effect: EffectWrite) -> int | None:
        # The effect rows' trigger (migration 0014) calls resumer_ledger(), which reads this
        # flag (runs/apps.py): up for the ledger's own statement only.
        cursor.db._resumer_ledger = True
        try:
            return super().write_effect(cursor, effect)
        finally:
            cursor.db._resumer_ledger = False

    def set_ledger(self, connection, on: bool) -> None:
        connection._resumer_ledger = on

    def set_maintenance(self, connection, on: bool) -> None:
        # The triggers call resumer_maintenance(), which reads this flag (runs/apps.py).
        connection._resumer_maintenance = on


class _Kept:
    """Django's cursor for one SQLite connection, kept open: a `with` hands it out and leaves
    it open (SQLiteAppend.cursor)."""

    __slots__ = ("raw", "wrapper")

    def __init__(self, connection) -> None:
        self.raw = connection.connection
        self.wrapper = connection.cursor()

    def __enter__(self) -> Any:
        return self.wrapper

    def __exit__(self, *exc: object) -> None:
        return None

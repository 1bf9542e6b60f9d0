"""The driver's own cursor, kept per connection, that the ledger's statements run on where
nobody observes the connection (PostgreSQL).

Django's cursor() builds a psycopg cursor, its adapters' copy and a wrapper for each
statement, and its psycopg backend reads every timestamptz through a Python subclass of
psycopg's loader (to give it the connection's time zone). The ledger runs a fixed set of
statements, three or four a stage, each returning a timestamp: a kept cursor with psycopg's
own (compiled) loader skips that work, about a third of what a statement costs the worker
(bench/stage_cost.py). What the statements do is unchanged: the same SQL on the same
connection, inside whatever transaction Django has open there, errors translated into
Django's as its cursor translates them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["KeptCursor", "kept_cursor", "observed"]


class KeptCursor:
    """A psycopg cursor kept for one connection: execute(), fetchone(), fetchall() and
    rowcount as Django's cursor has them, and a `with` that leaves it open."""

    __slots__ = ("db", "raw", "cursor")

    def __init__(self, db, raw) -> None:
        self.db, self.raw = db, raw
        self.cursor = raw.cursor()
        # psycopg's loader gives a timestamptz the session's zone. Django's gives it
        # db.timezone; the two agree when both are UTC (the session's is Django's
        # timezone_name, set as it connects), and only then is psycopg's used.
        if db.timezone_name == "UTC" and raw.info.parameter_status("TimeZone") == "UTC":
            # Imported here, on PostgreSQL, where Django's backend has imported psycopg
            # already: on SQLite the ledger's package would import it for nothing at every
            # start (the admin loads the ledger), a tenth of a second of a command line's.
            from psycopg.types.datetime import TimestamptzLoader

            self.cursor.adapters.register_loader("timestamptz", TimestamptzLoader)

    def __enter__(self) -> KeptCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> KeptCursor:
        db = self.db
        # What Django's cursor checks first: a statement after an error in an atomic block
        # that has not rolled back is refused, not sent.
        db.validate_no_broken_transaction()
        if getattr(db, "in_flight", None) is not None:
            db.read_answer()  # a write sent unanswered (resumer/postgresql/base.py)
        try:
            self.cursor.execute(sql, params)
        except Exception:
            # Translated as Django's cursor translates it, entered only when one was raised.
            with db.wrap_database_errors:
                raise
        return self

    def fetchone(self) -> tuple | None:
        try:
            return self.cursor.fetchone()
        except Exception:
            with self.db.wrap_database_errors:
                raise

    def fetchall(self) -> list[tuple]:
        try:
            return self.cursor.fetchall()
        except Exception:
            with self.db.wrap_database_errors:
                raise

    @property
    def rowcount(self) -> int:
        return self.cursor.rowcount


def observed(db) -> bool:
    """Whether someone observes `db`'s statements (an execute_wrapper, DEBUG's query log,
    assertNumQueries): they are then run on Django's cursor, and each waits for its answer,
    so the observer sees every one as it is."""
    return bool(db.execute_wrappers or db.queries_logged)


def kept_cursor(db, make: Any = None) -> KeptCursor | Any:
    """The cursor for the ledger's statements on `db`: the kept one (`make(db, raw)` makes it
    for a new database connection; a KeptCursor by default), or Django's own when someone
    observes the connection (an execute_wrapper, DEBUG's query log, assertNumQueries), so
    they see every statement there is."""
    if observed(db):
        return db.cursor()
    # What Django's cursor() does before it makes one: a failed health check closes the
    # connection, and a closed one is opened again, which a new cursor then follows.
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    kept = getattr(db, "_resumer_kept_cursor", None)
    if kept is None or kept.raw is not db.connection:
        kept = db._resumer_kept_cursor = (make or KeptCursor)(db, db.connection)
    return kept

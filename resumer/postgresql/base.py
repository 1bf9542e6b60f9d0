"""Django's PostgreSQL backend, and one statement it can send without waiting for its answer.

A durable tool call's outcome (its external id) need not wait for the disk: its intent did,
before the call. On PostgreSQL it need not wait for the server at all: sent, it is committed
by the server whatever the worker does next (even if the worker dies), while the worker
builds the next call's intent. Its answer (the fenced write wrote its row, or nothing) is
read before the connection's next statement, whoever sends it: every way Django reaches the
connection (a cursor, a commit, a rollback, autocommit, the health check) reads it first, and
the ledger's own cursor does too (runs/ledger/sql/driver.py). What the answer means is the
sender's to decide (runs/ledger/append.py); this module only keeps the connection usable and
the answer.

Settings: the ENGINE `resumer.postgresql` (resumer/settings.py sets it for a postgres URL;
RESUMER_PG_ANSWER_LATER=0 keeps Django's own backend, and every write then waits).
"""

from __future__ import annotations

import enum
import select
from collections.abc import Callable

from django.db.backends.postgresql import base
from psycopg.adapt import PyFormat, Transformer

__all__ = ["Answer", "DatabaseWrapper", "InFlight"]


class Answer(enum.Enum):
    PENDING = "pending"
    ROW = "row"  # the statement returned a row: a fenced write that wrote
    NO_ROW = "no row"  # it returned none: a fenced write that wrote nothing
    FAILED = "failed"  # the server refused it (an error): nothing was written
    LOST = "lost"  # the connection closed before the answer came: nobody knows


class InFlight:
    """One statement sent on a connection: its answer once read."""

    __slots__ = ("pgconn", "answer", "on_answer")

    def __init__(self, pgconn) -> None:
        self.pgconn = pgconn
        self.answer = Answer.PENDING
        # Called once the answer is read, wherever it is read: the sender's to set.
        self.on_answer: Callable[[InFlight], None] | None = None

    @property
    def pending(self) -> bool:
        return self.answer is Answer.PENDING

    @property
    def wrote(self) -> bool | None:
        """Once read: whether it returned a row (a fenced write that wrote); None when
        nobody knows (the connection was lost first, or it is not read yet)."""
        if self.answer in (Answer.PENDING, Answer.LOST):
            return None
        return self.answer is Answer.ROW


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.in_flight: InFlight | None = None

    def send_unanswered(self, sql: str, params: list) -> InFlight | None:
        """Send `sql` (one statement, %s placeholders, in autocommit: its own transaction)
        and return before the server answers. Its answer is read before the next statement
        on this connection (read_answer()). None, having sent nothing, inside a transaction
        and on a connection the server is ending: the caller's write then waits (and meets
        the error)."""
        self.ensure_connection()
        self.read_answer()
        if self.in_atomic_block or not self.get_autocommit():
            return None  # inside a transaction its commit would answer for it: it waits
        raw = self.connection
        if select.select([raw.pgconn.socket], [], [], 0)[0]:
            # An idle backend sends nothing unless it is ending the session (a shutdown, a
            # crash, pg_terminate_backend): sent there, a write would be lost unseen.
            return None
        # A statement's transformer is kept with the connection, as psycopg's cursor keeps
        # its own for a statement run again: it knows each parameter's dumper already.
        kept = getattr(raw, "_resumer_transformers", None)
        if kept is None:
            kept = raw._resumer_transformers = {}
        tx = kept.get(sql)
        if tx is None:
            tx = kept[sql] = Transformer(raw)
        values = tx.dump_sequence(params, [PyFormat.AUTO] * len(params))
        types, formats = tx.types or (), tx.formats
        pgconn = raw.pgconn
        with self.wrap_database_errors:
            name = self._prepared(raw, sql, types)
            if name is None:
                pgconn.send_query_params(_numbered(sql), values, types, formats)
            else:
                pgconn.send_query_prepared(name, values, formats)
            _flush(pgconn)
        sent = self.in_flight = InFlight(pgconn)
        return sent

    def read_answer(self) -> None:
        """Read the answer of the statement in flight, if one is: never raises (what it
        answered is the sender's to act on), and leaves the connection ready for the next."""
        sent = self.in_flight
        if sent is None:
            return
        self.in_flight = None
        if self.connection is None or self.connection.pgconn is not sent.pgconn:
            sent.answer = Answer.LOST
            return  # nothing to tell: LOST is what the sender assumes until told
        try:
            sent.answer = _answer(sent.pgconn)
        except Exception:  # the connection broke while reading
            sent.answer = Answer.LOST
        if sent.on_answer is not None:
            sent.on_answer(sent)

    def _prepared(self, raw, sql: str, types: tuple) -> bytes | None:
        """The name `sql` is prepared under on this connection for these parameter types,
        prepared on its first use; None where statements are not prepared (a pooler that
        cannot keep them: RESUMER_PG_PREPARED=0)."""
        if self.settings_dict["OPTIONS"].get("prepare_threshold") is None:
            return None
        names = getattr(raw, "_resumer_unanswered", None)
        if names is None:
            names = raw._resumer_unanswered = {}
        name = names.get((sql, types))
        if name is None:
            name = f"resumer_unanswered_{len(names)}".encode()
            result = raw.pgconn.prepare(name, _numbered(sql), types)
            if result.status != 1:  # COMMAND_OK
                raise self.Database.ProgrammingError(result.error_message.decode())
            names[(sql, types)] = name
        return name

    # Every way Django reaches the connection reads the answer first.

    def create_cursor(self, name=None):
        self.read_answer()
        return super().create_cursor(name)

    def _set_autocommit(self, autocommit):
        self.read_answer()
        return super()._set_autocommit(autocommit)

    def _commit(self):
        self.read_answer()
        return super()._commit()

    def _rollback(self):
        self.read_answer()
        return super()._rollback()

    def is_usable(self):
        self.read_answer()
        return super().is_usable()

    def _close(self):
        if self.in_flight is not None:
            self.in_flight.answer = Answer.LOST
            self.in_flight = None
        return super()._close()


def _numbered(sql: str) -> bytes:
    """%s placeholders as $1, $2... (the ledger's statements have no other %)."""
    parts = sql.split("%s")
    if any("%" in part for part in parts):
        raise ValueError("a statement sent unanswered takes %s placeholders and no other %")
    numbered = [f"{part}${i}" for i, part in enumerate(parts[:-1], start=1)]
    return ("".join(numbered) + parts[-1]).encode()


def _flush(pgconn) -> None:
    """Everything sent: psycopg keeps its connections non-blocking."""
    while pgconn.flush():
        select.select([], [pgconn.socket], [])


def _answer(pgconn) -> Answer:
    """What the statement came to. A server's error is not kept: the sender writes again
    what did not land (runs/ledger/append.py), and meets the error there if it stands."""
    while pgconn.is_busy():
        select.select([pgconn.socket], [], [])
        pgconn.consume_input()
    answer = Answer.NO_ROW
    while (result := pgconn.get_result()) is not None:
        if result.status != 2:  # not TUPLES_OK: an error
            answer = Answer.FAILED
        elif result.ntuples:
            answer = Answer.ROW
    return answer

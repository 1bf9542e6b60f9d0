"""Commits that need not wait for the disk: deferred_commit(), a transaction all of whose
appends say flush=False, and what append() asks of the one it runs in (deferral_of)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from runs.ledger.rows import LedgerError, NewEvent
from runs.ledger.sql import for_connection

__all__ = ["Deferral", "deferral_of", "deferred_commit"]


@dataclass
class Deferral:
    """A deferred_commit() open on `connection`; `said` once its transaction knows."""

    connection: Any
    said: bool = False

    def say(self) -> None:
        if not self.said:
            sql = for_connection(self.connection)
            with sql.cursor(self.connection) as cursor:
                sql.defer_flush(cursor)
            self.said = True


_deferral: ContextVar[Deferral | None] = ContextVar("resumer_deferral", default=None)


def deferral_of(connection, new: NewEvent, flush: bool) -> Deferral | None:
    """The deferred_commit() this append runs in, if any."""
    deferral = _deferral.get()
    if deferral is None or deferral.connection is not connection:
        return None
    if flush:
        # Checked before anything is written: the transaction's commit will not wait, so a
        # write that must (an intent, a stop) has no place in it.
        raise LedgerError(f"a {new.type} that must wait for the disk, inside deferred_commit()")
    return deferral


@contextmanager
def deferred_commit(flush: bool = False) -> Iterator[None]:
    """A transaction of the caller's own whose commit need not wait for the disk: append's
    `flush=False` said of a whole transaction (an append and what rides with it, an HTTP
    tool's exchanges and their artifact rows), all of which a crash may lose. Appends inside
    must say flush=False too (one that must wait raises LedgerError). On PostgreSQL the first
    one turns synchronous_commit off in its own statement (no round trip more, unless it took
    the locked path); on SQLite at FULL the transaction commits at NORMAL. A plain transaction.atomic() with `flush`, with RESUMER_DEFER_FLUSH off,
    or inside a transaction already open: that one's commit decides, and waits."""
    connection = connections[DEFAULT_DB_ALIAS]
    if flush or not settings.RESUMER_DEFER_FLUSH or connection.in_atomic_block:
        with transaction.atomic():
            yield
        return
    with for_connection(connection).deferring(connection), transaction.atomic():
        token = _deferral.set(Deferral(connection))
        try:
            yield
        finally:
            _deferral.reset(token)

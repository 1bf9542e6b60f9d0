"""Lifting the ledger's triggers, for one connection and one block only: all of them
(maintenance), or the effect rows' for the ledger's own writes (ledger_writes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections

from runs.ledger.sql import for_connection

__all__ = ["ledger_writes", "maintenance"]


@contextmanager
def maintenance(using: str = "default") -> Iterator[None]:
    """Lift the append-only triggers for this connection only (test teardown's flush, a
    retention purge). Any other connection, and any raw client, stays refused."""
    connection = connections[using]
    connection.ensure_connection()
    sql = for_connection(connection)
    sql.set_maintenance(connection, True)
    try:
        yield
    finally:
        sql.set_maintenance(connection, False)


@contextmanager
def ledger_writes(using: str = "default") -> Iterator[None]:
    """The ledger's own effect writes through the ORM (an intent on a key that has an
    effect, a supervisor's edit), inside the append's transaction: the effect rows' trigger
    lets them through. The append path's SQL says the same in its own statements."""
    connection = connections[using]
    connection.ensure_connection()
    sql = for_connection(connection)
    sql.set_ledger(connection, True)
    try:
        yield
    finally:
        sql.set_ledger(connection, False)

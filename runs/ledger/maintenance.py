"""Lifting the append-only triggers, for one connection and one block only."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections

from runs.ledger.sql import for_connection

__all__ = ["maintenance"]


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

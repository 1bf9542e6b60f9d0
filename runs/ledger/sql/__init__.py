"""The ledger's SQL on each database vendor: one class per vendor behind one interface
(base.py; sqlite.py, postgresql.py).

The append path is the hottest code in Resumer (every tool call writes two events), so its
statements are written once per vendor in SQL instead of being compiled by the ORM on every
call. On PostgreSQL, where each statement is a round trip, the event insert and the run head
update are one statement, and a writer that knows the head (it wrote the last event) locks,
fences, inserts and updates in a single one. bench/ledger_append.py measures what this buys.

An effect's intent and its outcome ride with their event (EffectClaim, EffectSettle): the
effect row is written in the event's transaction on SQLite and in the event's very statement
on PostgreSQL, so a durable tool call is two writes, as a SAFE call is. bench/tool_call.py
measures the call. A stage's end rides with its VERIFIED event the same way (CheckpointSeal,
and the lease's release): on PostgreSQL a stage without artifacts ends in one statement.

`for_connection(connection)` returns the vendor's instance, built once per vendor. The same
classes say how `maintenance()` lifts the append-only triggers on one connection.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from runs.ledger.sql.base import AppendSQL
from runs.ledger.sql.boundary import BoundarySQL
from runs.ledger.sql.postgresql import PostgreSQLAppend
from runs.ledger.sql.sqlite import SQLiteAppend

__all__ = [
    "AppendSQL",
    "BoundarySQL",
    "PostgreSQLAppend",
    "SQLiteAppend",
    "boundary_for",
    "for_connection",
]

VENDORS: dict[str, type[AppendSQL]] = {"sqlite": SQLiteAppend, "postgresql": PostgreSQLAppend}
_built: dict[str, AppendSQL] = {}
_boundaries: dict[str, BoundarySQL] = {}


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


def boundary_for(connection) -> BoundarySQL:
    """The stage boundary's statements for this connection's vendor (boundary.py)."""
    built = _boundaries.get(connection.vendor)
    if built is None:
        built = _boundaries[connection.vendor] = BoundarySQL(connection, for_connection(connection))
    return built

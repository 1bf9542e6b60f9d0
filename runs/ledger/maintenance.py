"""Lifting the ledger's triggers, for one connection and one block only: all of them
(maintenance), or the effect rows' for the ledger's own writes (ledger_writes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from django.db import connections

from runs.ledger.sql import for_connection

__all__ = ["ledger_writes", "maintenance"]


@contextmanager
def _lifted(using: str, setting: str) -> Iterator[None]:
    """Turn the vendor's `set_<setting>` on for this connection, and off again after."""
    connection = connections[using]
    connection.ensure_connection()
    switch = getattr(for_connection(connection), f"set_{setting}")
    switch(connection, True)
    try:
        yield
    finally:
        switch(connection, False)


def maintenance(using: str = "default") -> AbstractContextManager[None]:
    """Lift the append-only triggers for this connection only (test teardown's flush, a
    retention purge). Any other connection, and any raw client, stays refused."""
    return _lifted(using, "maintenance")


def ledger_writes(using: str = "default") -> AbstractContextManager[None]:
    """The ledger's own effect writes through the ORM (an intent on a key that has an
    effect, a supervisor's edit), inside the append's transaction: the effect rows' trigger
    lets them through. The append path's SQL says the same in its own statements."""
    return _lifted(using, "ledger")

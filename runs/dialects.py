"""The ledger's SQL on each database vendor: one class per vendor behind one interface.

The append path is the hottest code in Resumer (every tool call writes two events), so its
statements are written once per vendor in SQL instead of being compiled by the ORM on every
call. On PostgreSQL, where each statement is a round trip, the event insert and the run head
update are one statement, and a writer that knows the head (it wrote the last event) locks,
fences, inserts and updates in a single one. bench/ledger_append.py measures what this buys.

`for_connection(connection)` returns the vendor's instance, built once per vendor. The same
classes say how `maintenance()` lifts the append-only triggers on one connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.db.models.functions import Now
from django.db.models.sql import Query

from runs.models import Event, Lease, Run

__all__ = ["EVENT_COLUMNS", "AppendSQL", "PostgreSQLAppend", "SQLiteAppend", "for_connection"]

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


class AppendSQL:
    """The append path's statements on one vendor. This base writes an event and moves the
    run's head in two statements; a vendor that can do better overrides `write`, and one that
    can fence, check the head, insert and update in one statement sets `guarded`."""

    vendor: ClassVar[str] = ""
    # Whether write_guarded() exists: the one-statement append of a writer that knows the head.
    guarded: ClassVar[bool] = False

    def __init__(self, connection) -> None:
        qn = self.qn = connection.ops.quote_name
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
        created = Event._meta.get_field("created_at")
        self.created_at_column = created.get_col(Event._meta.db_table)
        self.created_at_converters = connection.ops.get_db_converters(
            self.created_at_column
        ) + created.get_db_converters(connection)

    # --- statements ---------------------------------------------------------------------

    def sets(self, moves: Moves) -> tuple[str, list[Any]]:
        """The SET list of the head update and its parameters. Every append also bumps the
        run's version (approvals compare-and-set on it) and stamps updated_at."""
        qn = self.qn
        sets = [f"{qn('version')} = {qn('version')} + 1", f"{qn('updated_at')} = {self.now}"]
        params: list[Any] = []
        for column, value in moves.items():
            if isinstance(value, Now):
                sets.append(f"{qn(column)} = {self.now}")
            else:
                sets.append(f"{qn(column)} = %s")
                params.append(value)
        return ", ".join(sets), params

    def update(self, set_list: str) -> str:
        return f"UPDATE {self.run_table} SET {set_list} WHERE {self.qn('id')} = %s"

    # --- what the append path calls -----------------------------------------------------

    def read_head(self, cursor, run_id: int, token: int) -> tuple[str, str, int, str, bool] | None:
        """Fence and lock in one statement: the run's (pipeline, status, last_seq, head_hash,
        deviated) if `token` still holds an unexpired lease on it, else None."""
        cursor.execute(self.lock, [run_id, token])
        return cursor.fetchone()

    def write(self, cursor, row: Sequence[Any], moves: Moves, run_id: int) -> tuple[int, Any]:
        """Insert the event row and move the run's head; the caller holds the run's lock.
        Returns the event's id and created_at as the database returned it (None when the
        database cannot return it)."""
        cursor.execute(self.insert, row)
        if self.returning:
            pk, created_at = cursor.fetchone()
        else:
            pk, created_at = cursor.lastrowid, None
        set_list, params = self.sets(moves)
        cursor.execute(self.update(set_list), [*params, run_id])
        return pk, created_at

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
    ) -> tuple[int, Any] | None:
        """Lock, fence (token and expiry), check that the head is still (last_seq, head_hash),
        insert and move the head, all in one statement; None, having written nothing, when
        anything moved. Only vendors with `guarded` have it."""
        raise NotImplementedError(f"{self.vendor} has no one-statement append")

    def created_at(self, value: Any, connection, pk: int) -> Any:
        """The returned created_at run through the converters the ORM would apply (SQLite
        returns text); read back when the insert could not return it."""
        if value is None:
            return Event.objects.values_list("created_at", flat=True).get(pk=pk)
        for converter in self.created_at_converters:
            value = converter(value, self.created_at_column, connection)
        return value

    # --- maintenance --------------------------------------------------------------------

    def set_maintenance(self, connection, on: bool) -> None:
        """Lift (on) or restore (off) the append-only triggers for this connection only."""
        raise NotImplementedError


class SQLiteAppend(AppendSQL):
    """SQLite: the IMMEDIATE transaction already holds the database's write lock, so the
    fence is a plain read, and insert and update are two cheap statements in-process."""

    vendor = "sqlite"

    def set_maintenance(self, connection, on: bool) -> None:
        # The triggers call resumer_maintenance(), which reads this flag (runs/apps.py).
        connection._resumer_maintenance = on


class PostgreSQLAppend(AppendSQL):
    """PostgreSQL: the fence locks the run row (serialising appends to the run) *and* the
    lease row, so a takeover that commits while a write waits for the lock is re-checked
    against the lease's newest version. Insert and head update are one statement."""

    vendor = "postgresql"
    guarded = True

    def __init__(self, connection) -> None:
        super().__init__(connection)
        qn = self.qn
        self.insert_and_update = (
            f"WITH e AS ({self.insert}), u AS ({self.update('{sets}')}) "
            f"SELECT {qn('id')}, {qn('created_at')} FROM e"
        )
        # The JSON columns are cast: in INSERT ... SELECT an untyped literal is text, which
        # has no assignment cast to jsonb.
        selected = ", ".join(
            "%s::jsonb" if c in ("inputs", "payload", "artifacts") else "%s" for c in EVENT_COLUMNS
        )
        self.guarded_insert = (
            f"WITH h AS (SELECT r.{qn('id')} {self.fence} AND r.{qn('last_seq')} = %s "
            f"AND r.{qn('head_hash')} = %s{self.lock_of}), "
            f"e AS (INSERT INTO {self.event_table} ({self.columns}) "
            f"SELECT {selected} FROM h{self.returned}), "
            f"u AS (UPDATE {self.run_table} SET {{sets}} "
            f"WHERE {qn('id')} = (SELECT {qn('id')} FROM h)) "
            f"SELECT {qn('id')}, {qn('created_at')} FROM e"
        )

    def write(self, cursor, row: Sequence[Any], moves: Moves, run_id: int) -> tuple[int, Any]:
        set_list, params = self.sets(moves)
        cursor.execute(self.insert_and_update.replace("{sets}", set_list), [*row, *params, run_id])
        return cursor.fetchone()

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
    ) -> tuple[int, Any] | None:
        set_list, params = self.sets(moves)
        cursor.execute(
            self.guarded_insert.replace("{sets}", set_list),
            [run_id, token, last_seq, head_hash, *row, *params],
        )
        return cursor.fetchone()

    def set_maintenance(self, connection, on: bool) -> None:
        # A session setting the trigger function reads (migration 0002); other sessions
        # keep theirs.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('resumer.maintenance', %s, false)", ["on" if on else "off"]
            )


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

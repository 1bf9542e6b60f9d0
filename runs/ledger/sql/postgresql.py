"""The ledger's SQL on PostgreSQL, where each statement is a round trip: the event insert,
the head update and the effect's row are one statement."""

from __future__ import annotations

from typing import Any

from runs.ledger.sql.base import AppendSQL
from runs.ledger.sql.driver import kept_cursor, observed
from runs.ledger.sql.shapes import (
    ARTIFACT_COLUMNS,
    CHECKPOINT_COLUMNS,
    EFFECT_COLUMNS,
    EVENT_COLUMNS,
    JSON_COLUMNS,
    SETTLE_COLUMNS,
    EffectClaim,
    EffectSettle,
    EventRow,
    Moves,
    Write,
    Written,
    guard,
)
from runs.models import Artifact, Checkpoint, Lease

__all__ = ["PostgreSQLAppend"]

# A write that need not reach the disk before it returns (flush=False) turns off
# synchronous_commit for its own transaction and no other: set_config with is_local,
# evaluated in the head CTE, where it runs only once the fence held. In autocommit that
# transaction is the statement; inside a deferred_commit() it is the caller's, the exchanges'
# artifact rows included. PostgreSQL writes WAL in order, so the next flushed commit (an
# intent, a checkpoint) carries it to the disk too: a database crash can lose only a tail of
# such writes, never one from before a flushed write, and leaves the database as if they had
# rolled back.
DEFER_FLUSH = ", set_config('synchronous_commit', 'off', true)"
# The effect rows' trigger (migration 0014) lets a write through when the transaction says it
# is the ledger's: said in the statement that writes the effect, so it costs no round trip,
# and transaction-local, so it ends with the statement in autocommit.
LEDGER = "set_config('resumer.ledger', 'on', true)"


class PostgreSQLAppend(AppendSQL):
    """PostgreSQL: the fence locks the run row (serialising appends to the run) *and* the
    lease row, so a takeover that commits while a write waits for the lock is re-checked
    against the lease's newest version. Insert, head update and the effect's row are one
    statement; the guarded one also locks and fences, so it runs in autocommit."""

    vendor = "postgresql"
    guarded = True
    writes_in_with = True

    def placeholder(self, column: str) -> str:
        # In INSERT ... SELECT an untyped literal is text, which has no assignment cast to
        # jsonb.
        return "%s::jsonb" if column in JSON_COLUMNS else "%s"

    def __init__(self, connection) -> None:
        super().__init__(connection)
        qn = self.qn
        self.pk, self.created = qn("id"), qn("created_at")
        self.event_values = ", ".join(self.placeholder(c) for c in EVENT_COLUMNS)
        self.effect_columns = ", ".join(qn(c) for c in EFFECT_COLUMNS)
        self.effect_values = ", ".join(self.placeholder(c) for c in EFFECT_COLUMNS)
        self.heads = {flush: self.head(flush) for flush in (True, False)}
        self.checkpoint_table = qn(Checkpoint._meta.db_table)
        self.artifact_table = qn(Artifact._meta.db_table)
        self.lease_table, self.lease_run = qn(Lease._meta.db_table), qn(Lease._meta.pk.column)
        # The effect statements the locked path runs on their own, saying they are the
        # ledger's in a FROM that is evaluated before the row (and its trigger) is written.
        said = f"(SELECT {LEDGER}) AS ledger"
        self.claim = (
            f"INSERT INTO {self.effect_table} ({self.effect_columns}) "
            f"SELECT {self.effect_values} FROM {said} "
            f"ON CONFLICT ({qn('delivery_key')}) DO NOTHING RETURNING {self.pk}"
        )
        self.settle = (
            f"UPDATE {self.effect_table} SET {self.settle_set} FROM {said} WHERE {self.pk} = %s"
        )
        self.builders = {
            EffectClaim: self.claim_statement,
            EffectSettle: self.settle_statement,
        }
        # The statements by (kind of effect, flush, SET list, the seal's artifact count,
        # release, an event following) and by SET list: a bounded set (sets() has one SET list per shape of head
        # move), each built on its first use.
        self._guarded: dict[tuple[type, bool, str, int | None, bool, bool], str] = {}
        self._unguarded: dict[str, str] = {}

    # --- the statements -----------------------------------------------------------------
    # h is the run's row, locked and fenced, if its head is still the one the event chains
    # to. Every other part writes only when h (and, for a claim, the claimed row x) has a
    # row, so a stale head or a taken key writes nothing at all.

    def head(self, flush: bool) -> str:
        qn = self.qn
        return (
            f"h AS (SELECT r.{self.pk}, {LEDGER}{'' if flush else DEFER_FLUSH} {self.fence} "
            f"AND r.{qn('last_seq')} = %s AND r.{qn('head_hash')} = %s{self.lock_of})"
        )

    def event_statement(
        self,
        head: str,
        sets: str,
        seal: int | None = None,
        release: bool = False,
        then: bool = False,
    ) -> str:
        """The event, and what ends a stage riding with it: a, the seal's artifact rows
        (`seal` of them); c, the checkpoint sealed on it; l, the lease given up (the writer's
        last write: the next stage's job, queued once this commits, finds the lease free);
        f, the event that follows it, the run's last (`sets` move the head past it).
        Each writes only when h has a row, so a write refused writes none of them, and in
        autocommit the statement is the whole end of the stage: no BEGIN, no COMMIT, one
        round trip. A taken artifact version fails the whole statement."""
        pk, qn = self.pk, self.qn
        parts = [
            head,
            f"e AS (INSERT INTO {self.event_table} ({self.columns}) "
            f"SELECT {self.event_values} FROM h{self.returned})",
            f"u AS (UPDATE {self.run_table} SET {sets} WHERE {pk} = (SELECT {pk} FROM h))",
        ]
        rider = "NULL"
        if seal:
            one = ", ".join(["%s"] * len(ARTIFACT_COLUMNS))
            parts.append(
                f"a AS (INSERT INTO {self.artifact_table} ({self.artifact_columns}) "
                + " UNION ALL ".join([f"SELECT {one} FROM h"] * seal)
                + ")"
            )
        if seal is not None:
            parts.append(
                f"c AS (INSERT INTO {self.checkpoint_table} ({self.checkpoint_columns}) "
                f"SELECT {', '.join(self.placeholder(c) for c in CHECKPOINT_COLUMNS)} FROM h "
                f"RETURNING {self.created})"
            )
            rider = f"(SELECT {self.created} FROM c)"
        if release:
            parts.append(
                f"l AS (UPDATE {self.lease_table} SET {qn('holder')} = '', "
                f"{qn('expires_at')} = {self.now} "
                f"WHERE {self.lease_run} = (SELECT {pk} FROM h) AND {qn('token')} = %s)"
            )
        if then:
            parts.append(
                f"f AS (INSERT INTO {self.event_table} ({self.columns}) "
                f"SELECT {self.event_values} FROM h)"
            )
        return f"WITH {', '.join(parts)} SELECT {pk}, {self.created}, {rider} FROM e"

    def claim_statement(self, head: str, sets: str) -> str:
        pk = self.pk
        return (
            f"WITH {head}, "
            f"x AS (INSERT INTO {self.effect_table} ({self.effect_columns}) "
            f"SELECT {self.effect_values} FROM h "
            f"ON CONFLICT ({self.qn('delivery_key')}) DO NOTHING RETURNING {pk}), "
            f"e AS (INSERT INTO {self.event_table} ({self.columns}) "
            f"SELECT {self.event_values} FROM x{self.returned}), "
            f"u AS (UPDATE {self.run_table} SET {sets} WHERE {pk} = (SELECT {pk} FROM h) "
            f"AND EXISTS (SELECT 1 FROM x)) "
            f"SELECT e.{pk}, e.{self.created}, x.{pk} FROM e, x"
        )

    def settle_statement(self, head: str, sets: str) -> str:
        pk = self.pk
        return (
            f"WITH {head}, "
            f"e AS (INSERT INTO {self.event_table} ({self.columns}) "
            f"SELECT {self.event_values} FROM h{self.returned}), "
            f"u AS (UPDATE {self.run_table} SET {sets} WHERE {pk} = (SELECT {pk} FROM h)), "
            f"x AS (UPDATE {self.effect_table} SET {self.settle_set} WHERE {pk} = %s "
            f"AND EXISTS (SELECT 1 FROM h) RETURNING {pk}) "
            f"SELECT e.{pk}, e.{self.created}, (SELECT {pk} FROM x) FROM e"
        )

    def insert_and_update(self, sets: str) -> str:
        return (
            f"WITH e AS ({self.insert}), u AS ({self.update(sets)}) "
            f"SELECT {self.pk}, {self.created} FROM e"
        )

    # --- what the append path calls -----------------------------------------------------

    def cursor(self, connection) -> Any:
        return kept_cursor(connection)

    def write_event(self, cursor, row: EventRow, moves: Moves) -> tuple[int, Any]:
        set_list, params = self.sets(moves)
        sql = self._unguarded.get(set_list)
        if sql is None:
            sql = self._unguarded[set_list] = self.insert_and_update(set_list)
        return self.first_row(cursor, sql, [*row, *params, row.run_id])

    def write_guarded(self, cursor, write: Write) -> Written | None:
        return self.first_row(cursor, *self.guarded_write(write))

    def can_send(self, connection) -> bool:
        # Resumer's backend (resumer/postgresql/base.py) can, Django's own cannot
        # (RESUMER_PG_ANSWER_LATER=0); an observed connection sees each statement wait.
        return hasattr(connection, "send_unanswered") and not observed(connection)

    def send_guarded(self, connection, write: Write) -> Any:
        """write_guarded() sent without waiting for its answer: its InFlight, else None
        (nothing was sent: inside a transaction, or on a connection the server is ending)."""
        return connection.send_unanswered(*self.guarded_write(write))

    def guarded_write(self, write: Write) -> tuple[str, list[Any]]:
        """The guarded write's statement (built on its first use) and its parameters."""
        row, effect, seal = write.row, write.effect, write.seal
        set_list, params = self.sets(write.moves)
        key = (
            type(effect),
            write.flush,
            set_list,
            None if seal is None else len(seal.artifacts),
            write.release,
            write.then is not None,
        )
        sql = self._guarded.get(key)
        if sql is None:
            head = self.heads[write.flush]
            sql = self._guarded[key] = (
                self.event_statement(head, set_list, key[3], write.release, key[5])
                if effect is None
                else self.builders[key[0]](head, set_list)
            )
        if isinstance(effect, EffectClaim):
            claim = self.effect_params(effect.fields, EFFECT_COLUMNS)
            values = [*guard(row), *claim, *row, *params]
        elif isinstance(effect, EffectSettle):
            settle = self.effect_params(effect.fields, SETTLE_COLUMNS)
            values = [*guard(row), *row, *params, *settle, effect.pk]
        else:
            values = [*guard(row), *row, *params]
            if seal is not None:
                values += [value for artifact in seal.artifacts for value in artifact]
                values += seal.checkpoint_params(row)
            if write.release:
                values.append(row.token)
            if write.then is not None:
                values += write.then
        return sql, values

    def defer_flush(self, cursor) -> None:
        cursor.execute("SELECT set_config('synchronous_commit', 'off', true)")

    def set_ledger(self, connection, on: bool) -> None:
        # Transaction-local: an ORM write of the ledger's (effects.record_intent, an edit)
        # runs inside the append's transaction, and the setting goes with it.
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('resumer.ledger', %s, true)", ["on" if on else "off"])

    def set_maintenance(self, connection, on: bool) -> None:
        # A session setting the trigger function reads (migration 0002); other sessions
        # keep theirs.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('resumer.maintenance', %s, false)", ["on" if on else "off"]
            )

"""The stage boundary's statements outside the append path, each one statement built once per
database: take and release a run's lease, read the run for its new holder (with its newest
checkpoint, the one its next stage most often builds on), read the checkpoint a stage builds
on, and name a resumed run's artifact's next version in its own insert. (What ends a stage,
its checkpoint's and artifact rows and the release, rides with the append: shapes.py's
CheckpointSeal.) Compiling a queryset for each of these, on every stage job, cost more than
running the statement (bench/stage_cost.py shows the parts).

The SQL is the same on both vendors (RETURNING, ON CONFLICT, Django's own Now() and duration
arithmetic compiled for the connection), but for the take with its read, which only
PostgreSQL runs as one statement; statements run through the vendor's AppendSQL, so SQLite's
rewrite-once path applies to them as to the append's.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import DateTimeField, DurationField, ExpressionWrapper, Value
from django.db.models.functions import Now
from django.db.models.sql import Query

from runs.ledger.sql.reading import RowReader, convert, converters_of
from runs.models import Artifact, Checkpoint, Lease, Run

__all__ = ["BoundarySQL", "db_now_plus"]


def db_now_plus(seconds: float):
    """`now() + seconds` evaluated by the database, so every process agrees on time."""
    return ExpressionWrapper(
        Now() + Value(timedelta(seconds=seconds), output_field=DurationField()),
        output_field=DateTimeField(),
    )


class BoundarySQL:
    def __init__(self, connection, append_sql) -> None:
        self.run_sql = append_sql  # execute() and first_row(), the vendor's way
        qn = connection.ops.quote_name
        query = Query(Lease)
        compiler = query.get_compiler(connection=connection)
        now, _ = compiler.compile(Now())
        # now() + ttl: the compiled SQL takes the TTL as its one parameter, in the form the
        # backend gave it for one second (a timedelta on PostgreSQL, microseconds on SQLite).
        now_plus, (self._one_second,) = compiler.compile(db_now_plus(1.0).resolve_expression(query))
        lease, run_col = qn(Lease._meta.db_table), qn(Lease._meta.pk.column)
        token, expires = qn("token"), qn("expires_at")
        self.take = (
            f"UPDATE {lease} SET {token} = {token} + 1, {qn('holder')} = %s, "
            f"{expires} = {now_plus}, {qn('heartbeat_at')} = {now}, {qn('acquired_at')} = {now} "
            f"WHERE {run_col} = %s AND {expires} <= {now} RETURNING {token}"
        )
        self.run = RowReader(Run, connection, f"{qn('id')} = %s")
        # The newest checkpoint of a stage, optionally up to a branch point's seq
        # (checkpoints.latest_checkpoint); served by checkpoint_run_seq_unique.
        latest = f" ORDER BY {qn('last_seq')} DESC LIMIT 1"
        where = f"{qn('run_id')} = %s AND {qn('stage')} = %s"
        self.latest = RowReader(Checkpoint, connection, where, latest)
        self.latest_upto = RowReader(
            Checkpoint, connection, f"{where} AND {qn('last_seq')} <= %s", latest
        )
        self._build_reading(qn, token, latest, append_sql.writes_in_with)
        self.artifact_created = converters_of(Artifact._meta.get_field("created_at"), connection)
        artifact, version, name = qn(Artifact._meta.db_table), qn("version"), qn("name")
        # The next version of a name in the insert itself: no read before it. Two writers
        # of one name racing (a name belongs to one run's stage, so only a duplicate
        # delivery could) both compute the same version; the second's row conflicts and
        # writes nothing, and the caller asks again.
        self.next_version = (
            f"INSERT INTO {artifact} ({name}, {version}, {qn('sha256')}, {qn('size')}, "
            f"{qn('content_type')}, {qn('blob')}, {qn('run_id')}) "
            f"SELECT %s, COALESCE(MAX({version}), 0) + 1, %s, %s, %s, %s, %s "
            f"FROM {artifact} WHERE {name} = %s "
            f"ON CONFLICT ({name}, {version}) DO NOTHING "
            f"RETURNING {qn('id')}, {version}, {qn('created_at')}"
        )

    def _build_reading(self, qn, token: str, latest: str, in_with: bool) -> None:
        # The run read for its new holder comes with the run's newest checkpoint (k; none
        # when it has none of its own): the upstream a stage most often reads
        # (StageContext.upstream), without a statement of its own. Found by an index scan
        # of checkpoint_run_seq_unique, not a join the planner may hash.
        # The run's checkpoints, newest first.
        newest = f"FROM {self.latest.table} WHERE {qn('run_id')} = r.{qn('id')}{latest}"
        reading = f"{self.run.columns_of('r')}, {self.latest.columns_of('k')}"
        self.run_newest = (
            f"SELECT {reading} FROM {self.run.table} r LEFT JOIN {self.latest.table} k "
            f"ON k.{qn('id')} = (SELECT {qn('id')} {newest}) WHERE r.{qn('id')} = %s"
        )
        # The take and that read, in one statement where the vendor can update inside WITH
        # and join LATERAL (PostgreSQL): the row comes back only when the take did. One
        # statement is one snapshot, taken before the take may wait for the lease row's
        # lock: the caller checks that the head it read is still the run's (append's
        # `read_head`), and reads both again if not.
        self.take_reading = (
            f"WITH t AS ({self.take}) SELECT t.{token}, {reading} "
            f"FROM t, {self.run.table} r LEFT JOIN LATERAL (SELECT * {newest}) k ON TRUE "
            f"WHERE r.{qn('id')} = %s"
            if in_with
            else ""
        )

    def cursor(self, connection) -> Any:
        """The cursor these statements run on (AppendSQL.cursor)."""
        return self.run_sql.cursor(connection)

    def ttl(self, seconds: float) -> Any:
        if isinstance(self._one_second, timedelta):
            return timedelta(seconds=seconds)
        return int(round(self._one_second * seconds))

    # --- leases -------------------------------------------------------------------------

    def take_lease(self, cursor, run_id: int, holder: str, ttl: float) -> int | None:
        """Take the run's lease if it is free (expired or released): the new fencing token,
        or None when it is held or the run has no lease row."""
        row = self.run_sql.first_row(cursor, self.take, [holder, self.ttl(ttl), run_id])
        return row[0] if row else None

    def take_lease_reading_run(
        self, cursor, connection, run_id: int, holder: str, ttl: float
    ) -> tuple[int, Run | None, Checkpoint | None] | None:
        """take_lease(), and the run read for its new holder with its newest checkpoint: one
        statement on PostgreSQL, two on SQLite (where the read after the take cannot be
        stale: writers are serialised). None when the lease is held or the run has no lease
        row."""
        if self.take_reading:
            row = self.run_sql.first_row(
                cursor, self.take_reading, [holder, self.ttl(ttl), run_id, run_id]
            )
            if row is None:
                return None
            token, row = row[0], row[1:]
        else:
            token = self.take_lease(cursor, run_id, holder, ttl)
            if token is None:
                return None
            row = self.run_sql.first_row(cursor, self.run_newest, [run_id])
            if row is None:
                return token, None, None
        split = len(self.run.names)
        run = self.run.instance(row[:split], connection)
        newest = None if row[split] is None else self.latest.instance(row[split:], connection)
        return token, run, newest

    def release_lease(self, cursor, run_id: int, token: int) -> bool:
        """Give the lease up if `token` still holds it; whether it did."""
        return self.run_sql.execute(cursor, self.run_sql.release, [run_id, token]).rowcount == 1

    # --- rows -----------------------------------------------------------------------------

    def read_run(self, cursor, connection, pk: int) -> Run | None:
        row = self.run_sql.first_row(cursor, self.run.sql, [pk])
        return None if row is None else self.run.instance(row, connection)

    def latest_checkpoint(
        self, cursor, connection, run_id: int, stage: str, upto: int | None
    ) -> Checkpoint | None:
        if upto is None:
            reader, params = self.latest, [run_id, stage]
        else:
            reader, params = self.latest_upto, [run_id, stage, upto]
        row = self.run_sql.first_row(cursor, reader.sql, params)
        return None if row is None else reader.instance(row, connection)

    def insert_next_version(self, cursor, connection, artifact: Artifact) -> bool:
        """Insert `artifact` (unsaved) as the next version of its name; False, having written
        nothing, when another writer took that version first."""
        row = self.run_sql.first_row(
            cursor,
            self.next_version,
            [
                artifact.name,
                artifact.sha256,
                artifact.size,
                artifact.content_type,
                artifact.blob,
                artifact.run_id,
                artifact.name,
            ],
        )
        if row is None:
            return False
        artifact.id, artifact.version = row[0], row[1]
        artifact.created_at = convert(row[2], *self.artifact_created, connection)
        artifact._state.adding, artifact._state.db = False, connection.alias
        return True

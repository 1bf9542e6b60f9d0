"""A worker facing a database that does not answer pauses instead of draining its queue.

Every job needs the database. A worker that took stage jobs while it was down failed each one
at once, and the sweeper then put every such run in front of an operator (a job that failed
before its stage started), so a minute's outage emptied the queue into the inbox. Instead a
worker checks the database before it runs a job, puts the job back untouched when the
database does not answer, and waits, backing off with jitter so a fleet does not knock on a
recovering server in step. It says so once when it pauses and once when it goes on.
"""

from __future__ import annotations

import logging
import random
import select
import time
from collections.abc import Callable

from django.db import DatabaseError, InterfaceError, OperationalError, connection, connections

log = logging.getLogger("runs.worker")

# Seconds: the first wait, and the longest. Short enough that a run waits little past the
# database's return; long enough that many workers polling a recovering server cost it little.
FIRST_WAIT = 0.25
LONGEST_WAIT = 5.0


def database_answers() -> bool:
    """Whether the database takes a query now, on this thread's connection (the one kept
    from the last job, opened again if the server dropped it): a job that follows uses that
    connection. The query is the health check: a kept connection that fails it is replaced
    once before the answer is no."""
    for _ in range(2 if connection.connection is not None else 1):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return True
        except DatabaseError:
            connection.close()
    return False


def ready_for_job() -> bool:
    """database_answers() before a stage job, without its round trip when a kept PostgreSQL
    connection shows it is still open: an idle backend sends nothing unless it is ending the
    session (a server shutting down, crashing or terminating it sends its notice, or the
    socket closes), so an idle connection with nothing to read is one the server still
    holds. A server that stopped answering without closing would hang the query too; the
    job's first statement then meets the error, and execute() waits for the database.
    Every other case (no connection, not idle, something to read, SQLite) asks the query."""
    if _kept_and_quiet(connection):
        return True
    return database_answers()


def _kept_and_quiet(conn) -> bool:
    raw = conn.connection
    if conn.vendor != "postgresql" or raw is None or conn.errors_occurred:
        return False
    if conn.in_atomic_block or raw.closed or raw.broken or raw.info.transaction_status:
        return False  # transaction_status 0 is IDLE
    try:
        readable, _, _ = select.select([raw.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def keep_for_next_job() -> None:
    """After a stage job: keep this thread's connection for the next job, unless it may be
    in a state a job must not inherit. A new connection per job cost more than the stage's
    own statements, on both sides: the client's connect, and on PostgreSQL a new backend
    whose caches start cold and whose prepared statements (prepare_threshold) were never
    reused. What could carry over is closed instead: a transaction left open (an atomic
    block a crash unwound badly), an error the connection saw (Django's errors_occurred),
    or autocommit switched off. Session settings do not carry over: the ledger's are
    transaction-local (sql/postgresql.py), and maintenance() restores its own."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if conn.in_atomic_block or conn.errors_occurred or not conn.get_autocommit():
            conn.close()
        elif conn.vendor == "postgresql" and conn.connection.info.transaction_status:
            conn.close()  # not idle: a statement or transaction still open on the server


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` says this thread's connection is gone (the server crashed, restarted or
    dropped it), not that the database refused a statement (a constraint, SQLite's lock)."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    return connection.connection is None or not connection.is_usable()


def wait_for_database(what: str, tick: Callable[[], None] | None = None) -> bool:
    """Return once the database answers; True if it had to wait. `tick` is called on every
    round while waiting (a worker tells Redis it is alive)."""
    if database_answers():
        return False
    log.warning("database unreachable: %s paused until it answers", what)
    started = time.monotonic()
    wait = FIRST_WAIT
    while True:
        if tick is not None:
            tick()
        time.sleep(random.uniform(wait / 2, wait))
        if database_answers():
            break
        wait = min(wait * 2, LONGEST_WAIT)
    log.warning("database answers again: %s resumed after %.1f s", what, time.monotonic() - started)
    return True

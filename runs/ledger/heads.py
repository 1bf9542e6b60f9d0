"""What this process knows of the run heads it writes: the head after its last write under
each (database, run, fencing token), which lets append() fence and chain in its first
statement instead of a locked read before it (append._can_guard).

A stale entry costs one statement that writes nothing, never a wrong write: the guarded write
checks the token, the expiry and that the head is still the one it knows.
"""

from __future__ import annotations

import threading

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from runs.ledger.rows import Head
from runs.ledger.sql import boundary_for
from runs.models import Run

_known: dict[tuple[str, int, int], Head] = {}
_lock = threading.Lock()
_MAX = 1024


def known(alias: str, run_id: int, token: int) -> Head | None:
    return _known.get((alias, run_id, token))


def learn(alias: str, token: int, head: Head) -> None:
    """Know `head` for a writer that has just taken the lease under `token` and read its run:
    while the token holds, only this writer moves the head, so its first append can be the
    guarded one too. Nothing is known committed under the token yet."""
    with _lock:
        _store((alias, head.pk, token), head._replace(committed_seq=0))


def remember(alias: str, token: int, head: Head, committed: bool) -> None:
    """Know `head`, just written under `token`; `committed` when its write was its own
    transaction, else once the caller's commits (on_commit)."""
    key = (alias, head.pk, token)
    with _lock:
        before = _known.get(key)
        if not committed:
            head = head._replace(committed_seq=before.committed_seq if before else 0)
        _store(key, head)
    if not committed and transaction.get_connection(alias).in_atomic_block:
        # Committed with the caller's transaction, if it is: only then may check_head() count
        # on it (a rolled-back write is not a lost one).
        seq = head.last_seq
        transaction.on_commit(lambda: _committed(key, seq), using=alias)


def committed(alias: str, run_id: int, token: int, seq: int) -> None:
    """The write of `seq`, sent unanswered, is committed (append._settle)."""
    _committed((alias, run_id, token), seq)


def _store(key: tuple[str, int, int], head: Head) -> None:
    if key not in _known and len(_known) >= _MAX:
        del _known[next(iter(_known))]  # the oldest entry
    _known[key] = head


def _committed(key: tuple[str, int, int], seq: int) -> None:
    with _lock:
        found = _known.get(key)
        if found is not None and found.committed_seq < seq:
            _known[key] = found._replace(committed_seq=seq)


def forget() -> None:
    """Forget every head: the database was put back from a copy (a restore from a backup, a
    test's snapshot), so what this process wrote under its tokens is no longer in it, and a
    run id may come again with a head this process never wrote."""
    with _lock:
        _known.clear()


def run_for_writer(run_id: int, token: int) -> Run | None:
    """The run, read for a writer that has just taken its lease under `token`, whose head
    this process then knows (learn()); None when there is no such run. One statement, built
    once (sql/boundary.py), not a compiled queryset."""
    db = connections[DEFAULT_DB_ALIAS]
    with boundary_for(db).cursor(db) as cursor:
        run = boundary_for(db).read_run(cursor, db, run_id)
    if run is not None:
        learn_run(token, run)
    return run


def learn_run(token: int, run: Run) -> None:
    """learn() the head of `run`, as read for the writer holding `token`."""
    learn(
        run._state.db or DEFAULT_DB_ALIAS,
        token,
        Head(run.pk, run.pipeline, run.status, run.last_seq, run.head_hash, run.deviated),
    )

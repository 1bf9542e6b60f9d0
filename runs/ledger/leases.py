"""The single-writer lease of a run, by compare-and-set on the database's clock.

A lease is (holder, token, expires_at). Taking it always bumps the token; renewing and every
ledger write compare the token *and* the expiry in the same statement, so a worker that slept
through a takeover (or simply ran out of time) cannot write, whatever its own clock says.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models.functions import Now

from runs import ids
from runs.ledger.sql import boundary_for
from runs.ledger.sql.boundary import db_now_plus
from runs.models import Checkpoint, Lease, Run

log = logging.getLogger("runs.leases")


class LeaseLost(Exception):
    """The writer's fencing token is no longer current (taken over or expired)."""

    def __init__(self, run_id: int, token: int | None) -> None:
        super().__init__(
            f"lease lost: run-{run_id} is no longer held with fencing token {token}; "
            "another writer took over or the lease expired, so nothing was written"
        )
        self.run_id = run_id
        self.token = token


class LeaseBusy(Exception):
    """Somebody else holds an unexpired lease on the run."""


def ttl_seconds() -> float:
    return float(settings.RESUMER_LEASE_TTL)


# A held lease is renewed this many times per TTL, so one late or failed renewal (a slow
# round, a database hiccup) never lets it run out.
RENEWALS_PER_TTL = 3


def renewal_interval(ttl: float) -> float:
    """How long a holder goes between renewals: what the heartbeats keep to, and what the run
    page calls a worker gone silent once it has passed."""
    return ttl / RENEWALS_PER_TTL


def _clock() -> float:
    """Seconds on a clock that never goes back and, where the platform has one, keeps counting
    while the machine is suspended (CLOCK_BOOTTIME): a suspended VM wakes up *past* its
    deadline, never before it."""
    return time.clock_gettime(_CLOCK)


_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


class HeldLease:
    """What a worker knows of the lease it holds, to fence an external call without a read.

    Every acquire and renew sets `expires_at = now() + ttl` on the database's clock, in a
    statement that starts after this process read its own clock. So the lease cannot expire
    before `read + ttl` here, and a takeover needs an expired lease (the sweeper) or a run
    that stopped (an approved resume; a stopped run makes no more calls). Until
    `read + ttl - margin` the lease is this worker's, whatever the database holds, and
    `check()` answers from memory. The margin covers the two clocks' rates over one TTL.

    The heartbeat thread moves the deadline on each renewal, and marks the lease lost when a
    renewal is refused; the stage's thread reads both (a float and a flag: no lock needed).

    What this assumes that a read before each call did not: the database's clock does not
    step forward by more than the margin within one TTL (a lease would then expire early and
    be taken over while this worker still trusts it). NTP slews a running clock instead of
    stepping it; a host whose clock is stepped should run with a longer TTL."""

    def __init__(self, run_id: int, token: int, ttl: float, read_at: float) -> None:
        self.run_id = run_id
        self.token = token
        self.ttl = ttl
        self.deadline = read_at + ttl - _margin(ttl)
        self.lost = threading.Event()
        # Set once a transaction that released the lease committed (released_on_commit).
        self.released = False

    def renewed(self, read_at: float, ttl: float | None = None) -> None:
        ttl = self.ttl if ttl is None else ttl
        self.deadline = max(self.deadline, read_at + ttl - _margin(ttl))

    def check(self) -> None:
        """Raise LeaseLost unless the lease is certainly still this worker's."""
        if self.lost.is_set() or _clock() >= self.deadline:
            raise LeaseLost(self.run_id, self.token)


def _margin(ttl: float) -> float:
    return min(1.0, ttl / 10)


def hold(run_id: int, holder: str, *, ttl: float | None = None) -> HeldLease:
    """acquire() for a worker that will fence its calls with HeldLease.check()."""
    ttl = ttl_seconds() if ttl is None else ttl
    read_at = _clock()
    token = acquire(run_id, holder, ttl=ttl)
    return HeldLease(run_id, token, ttl, read_at)


def renew_held(held: HeldLease) -> None:
    """renew() that moves the held lease's deadline; LeaseLost marks it lost."""
    read_at = _clock()
    try:
        renew(held.run_id, held.token, ttl=held.ttl)
    except LeaseLost:
        held.lost.set()
        raise
    held.renewed(read_at)


def current(run_id: int) -> Lease:
    return Lease.objects.get(run_id=run_id)


def acquire(run_id: int, holder: str, *, ttl: float | None = None, takeover: bool = False) -> int:
    """Take the run's lease and return the new fencing token.

    Without `takeover` the lease must be free (expired or released). With it the caller
    takes the lease regardless: used by the sweeper and by an approved resume, both of which
    decide that the previous holder is gone; the token bump fences it if it is not. A
    takeover is nobody's heartbeat: `heartbeat_at` stays the last worker's own, which the run
    page shows as its last sign of life.
    """
    ttl = ttl_seconds() if ttl is None else ttl
    if not takeover:
        # The common case, a stage job taking a released lease: one statement that bumps
        # the token only if the lease is free, and returns it. Two callers racing both run
        # it; the row lock orders them and the second finds the lease taken.
        db = connections[DEFAULT_DB_ALIAS]
        with boundary_for(db).cursor(db) as cursor:
            token = boundary_for(db).take_lease(cursor, run_id, holder, ttl)
        if token is not None:
            return token
        _not_taken(run_id)
    seen = Lease.objects.filter(run_id=run_id).values_list("token", flat=True).first()
    if seen is None:
        raise Lease.DoesNotExist(f"{ids.run_id(run_id)} has no lease row")
    query = Lease.objects.filter(run_id=run_id, token=seen)
    # A concurrent taker that bumped the token after our read makes this match nothing:
    # it won, we report busy, and no two callers ever hold the same token.
    updated = query.update(
        token=seen + 1, holder=holder, expires_at=db_now_plus(ttl), acquired_at=Now()
    )
    if updated == 1:
        return seen + 1
    raise LeaseBusy(f"{ids.run_id(run_id)} is leased by another worker")


def hold_reading_run(
    run_id: int, holder: str, *, ttl: float | None = None
) -> tuple[HeldLease, Run | None, Checkpoint | None]:
    """hold() for a stage job, with the run its new holder reads next and the run's newest
    checkpoint (None when it has none of its own): in the take's own statement on PostgreSQL
    (sql/boundary.py), round trips fewer per stage. One statement is one snapshot, taken
    before the take may have waited for the lease row's lock, so the read may predate a
    commit the take waited for: the holder's first append says it chains to a read head
    (append's `read_head`), and is refused if the run's head is another."""
    ttl = ttl_seconds() if ttl is None else ttl
    read_at = _clock()
    db = connections[DEFAULT_DB_ALIAS]
    with boundary_for(db).cursor(db) as cursor:
        taken = boundary_for(db).take_lease_reading_run(cursor, db, run_id, holder, ttl)
    if taken is None:
        _not_taken(run_id)
    token, run, newest = taken
    return HeldLease(run_id, token, ttl, read_at), run, newest


def _not_taken(run_id: int) -> None:
    """Why a free lease's take took nothing: raise it."""
    if not Lease.objects.filter(run_id=run_id).exists():
        raise Lease.DoesNotExist(f"{ids.run_id(run_id)} has no lease row")
    raise LeaseBusy(f"{ids.run_id(run_id)} is leased by another worker")


def renew(run_id: int, token: int, *, ttl: float | None = None) -> None:
    ttl = ttl_seconds() if ttl is None else ttl
    updated = Lease.objects.filter(run_id=run_id, token=token, expires_at__gt=Now()).update(
        expires_at=db_now_plus(ttl), heartbeat_at=Now()
    )
    if updated != 1:
        raise LeaseLost(run_id, token)


def release(run_id: int, token: int) -> bool:
    """Give the lease up early so the next stage's worker can take it at once. Inside a
    transaction it goes with that transaction's commit (a checkpoint's carries it)."""
    db = connections[DEFAULT_DB_ALIAS]
    with boundary_for(db).cursor(db) as cursor:
        return boundary_for(db).release_lease(cursor, run_id, token)


@contextmanager
def taken_over(run_id: int, holder: str) -> Iterator[int]:
    """The run's lease for a write inside the caller's transaction, taken over and given back
    after it. Whoever takes it over has decided the run has no live holder (a stopped or a
    waiting run holds none): the token's bump fences any holder left behind. An exception
    leaves the release to the transaction's rollback, which undoes the take with the write."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("taken_over() writes inside its caller's transaction; open one")
    token = acquire(run_id, holder, takeover=True)
    yield token
    release(run_id, token)


@contextmanager
def writing(
    run_id: int, holder: str, *, takeover: bool = False, wait: float = 0.0
) -> Iterator[int]:
    """The run's lease for one transaction's writes, run in the block: taken (over, with
    `takeover`; else a free one, waiting up to `wait` seconds for it), and released after the
    transaction however it ended, so a refused write leaves the lease free too. LeaseBusy
    when the lease could not be had: nothing was written."""
    token = _acquire_waiting(run_id, holder, takeover=takeover, wait=wait)
    try:
        with transaction.atomic():
            yield token
    finally:
        release(run_id, token)


def _acquire_waiting(run_id: int, holder: str, *, takeover: bool, wait: float) -> int:
    deadline = time.monotonic() + wait
    while True:
        try:
            return acquire(run_id, holder, takeover=takeover)
        except LeaseBusy:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def released_on_commit(held: HeldLease) -> None:
    """Say that `held` was given up by a write of the open transaction (append's `release`):
    released once it commits, still held (and released the usual way) if it rolls back.
    Outside a transaction the write has committed, and it is released now."""

    def released() -> None:
        held.released = True

    transaction.on_commit(released)


def holds(run_id: int, token: int) -> bool:
    return Lease.objects.filter(run_id=run_id, token=token, expires_at__gt=Now()).exists()


class Heartbeats:
    """The leases this process's stages hold, each renewed every renewal_interval() until it
    is let go or lost; each renewal moves the held lease's deadline (HeldLease), which fences
    the stage's external calls. One thread per process renews them all: a thread started and
    joined for every stage cost more than a short stage's own statements.

    The thread connects for a round of renewals and closes after it: between rounds it holds
    no connection, so a test database can be dropped and a server restart costs it nothing.
    A renewal racing a stage's end is harmless: renew() compares the token and the expiry,
    so it cannot revive a lease the stage gave back."""

    def __init__(self) -> None:
        self._due: dict[HeldLease, float] = {}
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, held: HeldLease) -> None:
        with self._changed:
            self._due[held] = time.monotonic() + _interval(held)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, daemon=True, name="resumer-heartbeats"
                )
                self._thread.start()
            self._changed.notify()

    def unwatch(self, held: HeldLease) -> None:
        with self._changed:
            self._due.pop(held, None)

    def watching(self, held: HeldLease) -> bool:
        with self._changed:
            return held in self._due

    def _run(self) -> None:
        while True:
            with self._changed:
                due = self._wait_for_due()
            try:
                for held in due:
                    self._beat(held)
            finally:
                connection.close()

    def _wait_for_due(self) -> list[HeldLease]:
        """Under the lock: block until some watched lease is due; those, rescheduled."""
        while True:
            now = time.monotonic()
            due = [held for held, at in self._due.items() if at <= now]
            if due:
                for held in due:
                    self._due[held] = now + _interval(held)
                return due
            self._changed.wait(timeout=min(self._due.values(), default=now + 3600) - now)

    def _beat(self, held: HeldLease) -> None:
        try:
            renew_held(held)
        except LeaseLost:
            self.unwatch(held)  # the stage finds out at its next fenced write or call
        except Exception as exc:  # database hiccup: try again next beat
            log.warning("heartbeat for run-%s failed: %s", held.run_id, exc)
            connection.close()


def _interval(held: HeldLease) -> float:
    return max(renewal_interval(held.ttl), 0.05)


heartbeats = Heartbeats()

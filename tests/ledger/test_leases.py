"""The single-writer lease and its fencing token, as the append path enforces them."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from runs.events import RunCreated
from runs.ledger import leases
from runs.ledger.append import LeaseLost, Writer, append, create_run
from runs.models import Event, Lease, Run
from tests.support.events import called, started
from tests.support.processes import wait_for
from tests.support.state import another_session_waits_on_a_lock


def new_run() -> Run:
    return create_run(
        "content",
        RunCreated(input_versions={"topic": "resumable-agents", "facts": "v3"}),
        actor="test",
        first_stage="research",
    )


def event_count(run: Run) -> int:
    return Event.objects.filter(run=run).count()


@pytest.fixture
def run(db) -> Run:
    return new_run()


def test_a_writer_whose_lease_was_taken_over_cannot_append(run):
    old = Writer(run.pk, leases.acquire(run.pk, "worker-a"), "worker-a")
    leases.acquire(run.pk, "worker-b", takeover=True)
    before = event_count(run)
    with pytest.raises(LeaseLost):
        append(old, started("research"))
    assert event_count(run) == before
    assert not Event.objects.filter(run=run, token=old.token).exists()


def test_the_new_holder_can_append_after_a_takeover(run):
    leases.acquire(run.pk, "worker-a")
    new = Writer(run.pk, leases.acquire(run.pk, "worker-b", takeover=True), "worker-b")
    event = append(new, started("research"))
    assert Event.objects.get(pk=event.pk).token == new.token


def test_a_takeover_leaves_the_last_heartbeat_the_workers_own(run):
    leases.acquire(run.pk, "worker-a")
    # Its worker went silent five minutes ago.
    Lease.objects.filter(run=run).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    beat = Lease.objects.values_list("heartbeat_at", flat=True).get(run=run)

    leases.acquire(run.pk, "sweeper", takeover=True)

    lease = Lease.objects.get(run=run)
    assert (lease.holder, lease.heartbeat_at) == ("sweeper", beat)


def test_a_released_lease_cannot_append(run):
    writer = Writer(run.pk, leases.acquire(run.pk, "worker-a"), "worker-a")
    leases.release(run.pk, writer.token)
    before = event_count(run)
    with pytest.raises(LeaseLost):
        append(writer, started("research"))
    assert event_count(run) == before


def test_an_expired_lease_cannot_append(transactional_db):
    # Committed and outside a transaction, so the database clock really moves on (inside
    # one, PostgreSQL's now() is frozen at its start).
    run = new_run()
    writer = Writer(run.pk, leases.acquire(run.pk, "worker-a", ttl=0.3), "worker-a")
    wait_for(lambda: not leases.holds(run.pk, writer.token), timeout=30, what="lease expiry")
    before = event_count(run)
    with pytest.raises(LeaseLost):
        append(writer, started("research"))
    assert event_count(run) == before


def test_an_expired_lease_cannot_be_renewed(transactional_db):
    run = new_run()
    token = leases.acquire(run.pk, "worker-a", ttl=0.3)
    wait_for(lambda: not leases.holds(run.pk, token), timeout=30, what="lease expiry")
    with pytest.raises(LeaseLost):
        leases.renew(run.pk, token)


def test_a_live_lease_cannot_be_acquired_without_takeover(run):
    token = leases.acquire(run.pk, "worker-a")
    with pytest.raises(leases.LeaseBusy):
        leases.acquire(run.pk, "worker-b")
    lease = Lease.objects.get(run=run)
    assert (lease.token, lease.holder) == (token, "worker-a")


def test_renew_after_a_takeover_raises_lease_lost(run):
    token = leases.acquire(run.pk, "worker-a")
    leases.acquire(run.pk, "worker-b", takeover=True)
    with pytest.raises(LeaseLost):
        leases.renew(run.pk, token)
    assert Lease.objects.get(run=run).holder == "worker-b"


def test_release_with_a_stale_token_leaves_the_new_holder_alone(run):
    old = leases.acquire(run.pk, "worker-a")
    new = leases.acquire(run.pk, "worker-b", takeover=True)
    assert leases.release(run.pk, old) is False
    assert leases.holds(run.pk, new)


def test_tokens_only_increase_across_acquire_release_and_takeover(run):
    tokens = [Lease.objects.get(run=run).token]
    for step in range(6):
        # Alternate a takeover of a live lease with a plain acquire of a released one.
        token = leases.acquire(run.pk, f"holder-{step}", takeover=bool(step % 2))
        tokens.append(token)
        if step % 2:
            leases.release(run.pk, token)
        else:
            leases.acquire(run.pk, f"taker-{step}", takeover=True)
            tokens.append(Lease.objects.get(run=run).token)
    assert tokens == sorted(set(tokens))
    assert Lease.objects.get(run=run).token == tokens[-1]


def test_racing_acquirers_of_a_free_lease_get_one_winner(transactional_db):
    run = new_run()
    start = threading.Barrier(6)
    won: list[int] = []
    busy: list[str] = []

    def contend(name: str) -> None:
        try:
            start.wait(timeout=30)
            won.append(leases.acquire(run.pk, name))
        except leases.LeaseBusy:
            busy.append(name)
        finally:
            connection.close()

    threads = [threading.Thread(target=contend, args=(f"worker-{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(won) == 1
    assert len(busy) == 5
    assert Lease.objects.get(run=run).token == won[0] == 1


@pytest.mark.parametrize("has_appended", [False, True], ids=["first-write", "known-head"])
def test_a_write_queued_behind_a_takeover_on_postgresql_is_refused(transactional_db, has_appended):
    """The fencing check must see a takeover that commits while the write waits for the run's
    row lock (approve() locks the run, then takes the lease over, then commits). PostgreSQL
    re-checks a locked row's conditions on its newest version only for the rows it locks, so
    the lease row has to be locked too, or the write goes through with a stale token.
    `known-head`: a writer that appended before takes the one-statement path, which must
    refuse just the same."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks and their re-check are PostgreSQL's; SQLite serialises writers")
    run = new_run()
    writer = Writer(run.pk, leases.acquire(run.pk, "worker-a"), "worker-a")
    if has_appended:
        append(writer, started("research"))
    before = event_count(run)
    outcome: list[BaseException | str] = []

    def stale_append() -> None:
        try:
            append(writer, called(1, "research"))
            outcome.append("appended")
        except BaseException as exc:
            outcome.append(exc)
        finally:
            connection.close()

    with transaction.atomic():
        Run.objects.select_for_update().get(pk=run.pk)  # the approver holds the run row
        thread = threading.Thread(target=stale_append)
        thread.start()
        wait_for(
            lambda: another_session_waits_on_a_lock(connections["default"]),
            timeout=30,
            what="the stale writer to wait for the run's row lock",
        )
        leases.acquire(run.pk, "approver", takeover=True)
    thread.join(timeout=30)
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseLost), outcome
    assert event_count(run) == before


# --- the process's heartbeat thread ----------------------------------------------------------


def _expires_at(run: Run):
    return Lease.objects.values_list("expires_at", flat=True).get(run=run)


def _heartbeat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "resumer-heartbeats" and t.is_alive()]


def test_a_watched_lease_is_renewed_until_it_is_let_go(transactional_db):
    run = new_run()
    held = leases.hold(run.pk, "worker-a", ttl=0.6)
    first = _expires_at(run)
    leases.heartbeats.watch(held)
    try:
        wait_for(lambda: _expires_at(run) > first, timeout=30, what="a renewal")
    finally:
        leases.heartbeats.unwatch(held)
    assert not leases.heartbeats.watching(held)
    assert leases.holds(run.pk, held.token)
    assert not held.lost.is_set()


def test_one_thread_renews_the_leases_of_every_stage_of_the_process(transactional_db):
    runs = [new_run(), new_run()]
    helds = [leases.hold(r.pk, f"worker-{i}", ttl=0.6) for i, r in enumerate(runs)]
    firsts = [_expires_at(r) for r in runs]
    for held in helds:
        leases.heartbeats.watch(held)
    try:
        wait_for(
            lambda: all(_expires_at(r) > f for r, f in zip(runs, firsts, strict=True)),
            timeout=30,
            what="both leases renewed",
        )
        assert len(_heartbeat_threads()) == 1
    finally:
        for held in helds:
            leases.heartbeats.unwatch(held)


def test_a_lease_taken_over_is_marked_lost_and_no_longer_renewed(transactional_db):
    run = new_run()
    held = leases.hold(run.pk, "worker-a", ttl=0.6)
    leases.heartbeats.watch(held)
    try:
        taker = leases.acquire(run.pk, "sweeper", takeover=True)
        wait_for(held.lost.is_set, timeout=30, what="the heartbeat to find the lease lost")
        assert not leases.heartbeats.watching(held)
        assert Lease.objects.get(run=run).token == taker
        with pytest.raises(LeaseLost):
            held.check()
    finally:
        leases.heartbeats.unwatch(held)


def test_a_lease_taken_over_for_a_write_is_given_back_after_it(run):
    leases.acquire(run.pk, "worker-a")
    with transaction.atomic(), leases.taken_over(run.pk, "user:ana") as token:
        event = append(Writer(run.pk, token, "user:ana"), started("research"))
    assert Event.objects.get(pk=event.pk).token == token
    assert not leases.holds(run.pk, token)


def test_a_takeover_outside_a_transaction_is_refused_and_takes_nothing(transactional_db):
    run = new_run()
    before = Lease.objects.get(run=run).token
    with (
        pytest.raises(RuntimeError, match="inside its caller's transaction"),
        leases.taken_over(run.pk, "user:ana"),
    ):
        pass
    assert Lease.objects.get(run=run).token == before


def test_a_write_refused_inside_its_lease_leaves_nothing_written_and_the_lease_free(run):
    before = event_count(run)
    with pytest.raises(ValueError, match="refused"), leases.writing(run.pk, "user:ana") as token:
        append(Writer(run.pk, token, "user:ana"), started("research"))
        raise ValueError("refused")
    assert event_count(run) == before
    assert not leases.holds(run.pk, token)
    leases.acquire(run.pk, "worker-b")  # free: no takeover needed


def test_a_write_that_cannot_have_the_lease_in_time_raises_busy_and_writes_nothing(run):
    held = leases.acquire(run.pk, "worker-a")
    before = event_count(run)
    with pytest.raises(leases.LeaseBusy), leases.writing(run.pk, "user:ana", wait=0.1):
        append(Writer(run.pk, held, "user:ana"), started("research"))
    assert event_count(run) == before
    assert leases.holds(run.pk, held)

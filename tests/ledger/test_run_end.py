"""A run's last stage ends it in the write that verifies it (issue 28): VERIFIED, its
checkpoint, SUCCEEDED after it and the lease given up, on PostgreSQL in one statement; all of
it or, when the fence does not hold, none of it. On committed data, as the engine writes it."""

from __future__ import annotations

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, transaction

from runs.events import Succeeded
from runs.ledger import heads, leases
from runs.ledger.append import LeaseLost, LedgerError, RunMove, Writer, append
from runs.ledger.checkpoints import write_checkpoint
from runs.ledger.verify import verify_chain
from runs.models import Checkpoint, Event, Run
from tests.ledger.test_ledger import new_run, writer_for
from tests.support.events import started as started_event


@pytest.fixture
def started(transactional_db) -> Writer:
    writer = writer_for(new_run())
    # The engine's STARTED: from here this process knows the head, as a stage's writer does.
    append(writer, started_event("research"), move=RunMove(Run.Status.RUNNING))
    return writer


def _end_run(
    writer: Writer, then: str | None = Run.Status.SUCCEEDED, run: Run | None = None
) -> Checkpoint:
    return write_checkpoint(
        writer,
        run or Run.objects.get(pk=writer.run_id),
        stage="research",
        next_stage="",
        manifest={"inputs": {}, "artifacts": [], "rules": [], "outputs": {"n": 3}},
        move=RunMove(Run.Status.RUNNING, current_stage="research"),
        release=True,
        then=then,
    )


def _assert_ended(writer: Writer, checkpoint: Checkpoint) -> None:
    run = Run.objects.get(pk=writer.run_id)
    verified, succeeded = Event.objects.filter(run=run).order_by("-seq")[:2][::-1]
    assert (verified.type, succeeded.type) == (Event.Type.VERIFIED, Event.Type.SUCCEEDED)
    assert succeeded.seq == verified.seq + 1 and succeeded.prev_hash == verified.hash
    assert succeeded.token == writer.token
    assert (run.status, run.last_seq, run.head_hash) == (
        Run.Status.SUCCEEDED,
        succeeded.seq,
        succeeded.hash,
    )
    assert Checkpoint.objects.get(pk=checkpoint.pk).last_seq == verified.seq
    assert leases.current(run.pk).holder == ""
    assert verify_chain(run.pk).ok


def test_a_last_stage_ends_the_run_in_its_write(started):
    run = Run.objects.get(pk=started.run_id)
    ran: list[str] = []
    with connection.execute_wrapper(
        lambda execute, sql, *args: ran.append(sql) or execute(sql, *args)
    ):
        checkpoint = _end_run(started, run=run)
    _assert_ended(started, checkpoint)
    if connection.vendor == "postgresql":
        assert len(ran) == 1  # VERIFIED, the checkpoint, SUCCEEDED, the release


def test_the_writer_knows_the_head_the_run_ended_on(started):
    _end_run(started)
    run = Run.objects.get(pk=started.run_id)
    known = heads.known(DEFAULT_DB_ALIAS, run.pk, started.token)
    assert (known.status, known.last_seq, known.head_hash) == (
        Run.Status.SUCCEEDED,
        run.last_seq,
        run.head_hash,
    )
    assert known.committed_seq == run.last_seq


def test_a_last_stage_ends_the_run_inside_a_callers_transaction(started):
    with transaction.atomic():
        checkpoint = _end_run(started)
    _assert_ended(started, checkpoint)


def test_a_writer_that_does_not_know_the_head_ends_the_run_after_the_locked_read(
    transactional_db,
):
    writer = writer_for(new_run())  # no append yet: the head is read under the run's lock
    checkpoint = _end_run(writer)
    _assert_ended(writer, checkpoint)


def test_a_last_stage_end_of_a_writer_without_the_lease_writes_neither_event(started):
    intruder = leases.acquire(started.run_id, "intruder", takeover=True)
    before = list(Event.objects.filter(run_id=started.run_id).values_list("seq", flat=True))
    with pytest.raises(LeaseLost):
        _end_run(started)
    assert list(Event.objects.filter(run_id=started.run_id).values_list("seq", flat=True)) == (
        before
    )
    assert not Checkpoint.objects.filter(run_id=started.run_id).exists()
    assert Run.objects.get(pk=started.run_id).status == Run.Status.RUNNING
    assert leases.holds(started.run_id, intruder)


def test_only_a_terminal_status_with_its_own_event_follows_another(started):
    before = Event.objects.filter(run_id=started.run_id).count()
    with pytest.raises(LedgerError, match="no event follows"):
        _end_run(started, then=Run.Status.FAILED)
    with pytest.raises(LedgerError, match="ends with no event after it"):
        append(started, Succeeded(), move=RunMove(Run.Status.SUCCEEDED), then=Run.Status.SUCCEEDED)
    assert Event.objects.filter(run_id=started.run_id).count() == before
    assert Run.objects.get(pk=started.run_id).status == Run.Status.RUNNING

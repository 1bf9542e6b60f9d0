"""What an append checks of the run's head besides the fence: that it has not gone back
behind what this writer committed (a database crash lost writes: HeadLost), and, for a head
that was read as the lease was taken, that it is still the run's (StaleRead). append() asks
both under the run's lock; a worker whose connection died mid-stage asks check_head() first
once the database answers."""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS

from runs import ids
from runs.ledger import heads
from runs.ledger.leases import LeaseLost
from runs.ledger.rows import Head, Writer
from runs.models import Event, Run

__all__ = ["HeadLost", "StaleRead", "check_head", "moved_since_read", "went_back"]


class HeadLost(LeaseLost):
    """The run's head is behind what this writer wrote under its token: writes it was told
    were committed are gone (a database crash took the last ones that did not wait for the
    disk, or the database was restored). The writer stops, writing nothing: what it knows no
    longer matches the log, and the resume's plan starts from the log."""

    def __init__(self, run_id: int, token: int | None, seq: int, known: int) -> None:
        Exception.__init__(
            self,
            f"{ids.run_id(run_id)}'s head is at seq {seq}, behind the seq {known} this worker wrote "
            f"under fencing token {token}: its last writes were lost, so nothing more was "
            "written",
        )
        self.run_id = run_id
        self.token = token


def check_head(writer: Writer) -> None:
    """Raise HeadLost if the last write this process committed under the writer's token is
    gone from the log. A worker whose connection died mid-stage asks this once the database
    answers again, before anything else: its next write may never come (it stops), and the
    run's INTERRUPTED would then fill the gap unnoticed."""
    known = heads.known(DEFAULT_DB_ALIAS, writer.run_id, writer.token)
    if known is None or not known.committed_seq:
        return
    mine = Event.objects.filter(run_id=writer.run_id, seq=known.committed_seq, token=writer.token)
    if not mine.exists():
        head = Run.objects.filter(pk=writer.run_id).values_list("last_seq", flat=True).first()
        raise HeadLost(writer.run_id, writer.token, head or 0, known.committed_seq)


class StaleRead(Exception):
    """The head a writer read is not the run's head under the lock, though its lease holds:
    the read predates a write that committed before the lease was taken. Nothing was
    written; the writer reads the run again."""


def moved_since_read(writer: Writer, known: Head | None, head: Head) -> StaleRead | None:
    # While the token holds nobody else appends, so a head other than the one read means the
    # read saw the run from before the take (one statement's snapshot, taken before the take
    # waited for the lease row): what was decided from it (a ticket still pending, a stage
    # still to run) may no longer hold.
    if known is None or (known.last_seq, known.head_hash) != (head.last_seq, head.head_hash):
        return StaleRead(
            f"{ids.run_id(writer.run_id)}'s head moved since it was read (seq {head.last_seq}, "
            f"read {known.last_seq if known else 'nothing'})"
        )
    return None


def went_back(writer: Writer, known: Head | None, head: Head) -> HeadLost | None:
    # While a token holds, only its writer moves the head, and only forward. Going on from a
    # head that went back would build on a log missing what this worker did (an outcome it
    # acted on), so it must not.
    if known is not None and head.last_seq < known.committed_seq:
        return HeadLost(writer.run_id, writer.token, head.last_seq, known.committed_seq)
    return None

"""How a stage job starts: it takes the run's lease and reads the run (take), then consumes
the run's ticket with STARTED, or finds that it has nothing to do (begin)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from runs import tracing
from runs.events import Started
from runs.ledger import chain, heads, leases
from runs.ledger.append import RunMove, StaleRead, Writer, append
from runs.models import Checkpoint, Run
from runs.pipeline import registry

__all__ = ["Taken", "begin", "take"]

log = logging.getLogger("runs.engine")


@dataclass
class Taken:
    """What a stage job's take got: the lease, and the run and its newest checkpoint as the
    take read them."""

    held: leases.HeldLease
    run: Run | None
    newest: Checkpoint | None


def take(run_pk: int, ticket: str, holder: str) -> Taken:
    """Take the lease for the job that owns the run's pending ticket, reading the run with
    it (leases.hold_reading_run).

    While a ticket is pending no stage is executing, so whoever holds the lease holds it for
    a moment: the previous stage's worker between its commit (which queued this job) and its
    release, a duplicate delivery finding nothing to do, a sweeper or a supervisor's edit. A
    job that gave up at once would be dropped with its ticket still pending, and the sweeper
    would later interrupt a healthy run; so the owner waits, at most one lease TTL (by then
    a holder that froze has expired). A job whose ticket is not pending (a duplicate, or a
    stage already taken) gives up at once, raising LeaseBusy: it has nothing to do anyway."""
    deadline = time.monotonic() + leases.ttl_seconds() + 1
    while True:
        try:
            return Taken(*leases.hold_reading_run(run_pk, holder))
        except leases.LeaseBusy:
            if time.monotonic() > deadline or not _ticket_pending(run_pk, ticket):
                raise
        time.sleep(min(0.1, leases.ttl_seconds() / 20))


def _ticket_pending(run_pk: int, ticket: str) -> bool:
    return bool(ticket) and Run.objects.filter(pk=run_pk, ticket=ticket).exists()


def begin(writer: Writer, stage_name: str, ticket: str, taken: Taken) -> Run | None:
    """Consume the ticket and append STARTED, or find that this job has nothing to do (a
    duplicate delivery, a stage already done, a run an operator has not resumed); the run,
    as STARTED left it, or None.

    `taken.run` is the run as the lease's take read it, in the same statement; it is not
    read again. While the token holds nobody else appends (every writer takes the lease,
    bumping the token), and the ticket moves only with the head (append's run fields). So
    STARTED is the guarded append, one statement that writes only if the token, its expiry
    and the head read here all still hold; if anything moved, it writes nothing and append's
    locked path decides: LeaseLost for a token that was taken over, StaleRead for a read
    older than the take (its snapshot predates a commit the take waited for), after which
    the run is read again, now after the take, and decided once more."""
    read = taken.run
    if not ticket or read is None:
        return None
    heads.learn_run(writer.token, read)
    try:
        return _start(writer, stage_name, ticket, read, read_head=True)
    except StaleRead as exc:
        log.info("%s; reading it again", exc)
    again = heads.run_for_writer(writer.run_id, writer.token)
    return None if again is None else _start(writer, stage_name, ticket, again)


def _start(
    writer: Writer, stage_name: str, ticket: str, run: Run, *, read_head: bool = False
) -> Run | None:
    if run.ticket != ticket or run.current_stage != stage_name or not run.is_active:
        return None
    stage = registry.get(run.pipeline).stage(stage_name)
    event = Started(
        stage=stage_name,
        input_versions={name: run.inputs.get(name) for name in stage.consumes},
        worker=writer.actor,
        token=writer.token,
        attempt=run.attempt,
        trace=tracing.started(run, stage_name),  # None unless tracing is on
    )
    started = append(
        writer,
        event,
        move=RunMove(Run.Status.RUNNING, ticket="", queued_at=None),
        read_head=read_head,
    )
    # What the append moved, as a read would now return it (the stage reads the run's
    # status, head and ticket; nothing in a stage reads its clock columns).
    run.status, run.ticket, run.queued_at = Run.Status.RUNNING, "", None
    run.last_seq, run.head_hash, run.version = started.seq, started.hash, run.version + 1
    run.head_anchor = chain.head_anchor(run.pk, started.seq, started.hash)
    run.attention = Run.attention_for(run.status, run.deviated)
    run.severity = Run.severity_for(run.status, run.deviated)
    return run

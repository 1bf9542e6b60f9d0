"""Crash detection: turn runs whose worker is gone into *interrupted*, with what is known.

Two ways a run loses its worker:
  * a stage was executing and its lease ran out (the worker stopped heartbeating: SIGKILL,
    OOM, a lost machine, a frozen process);
  * a stage was queued (its ticket pending) but Redis no longer has the job (flushed,
    restarted without persistence, never received it) or RQ gave up on it.

Both are read from the database's leases and tickets; RQ is only asked whether a queued job
still exists. The bound: a dead worker's run is interrupted within lease TTL + sweep interval
(30 s + 15 s by default); a lost queued job within RESUMER_QUEUE_GRACE + sweep interval.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models.functions import Now
from rq.job import Job

from runs import enqueue
from runs.events import Interrupted, read
from runs.ledger import leases
from runs.ledger.append import HeadLost, RunMove, Writer, append, check_head
from runs.models import Event, Lease, Run

log = logging.getLogger("runs.sweeper")

SWEEPER = "sweeper"


@dataclass(frozen=True)
class Finding:
    run_pk: int
    reason: str
    # What was found, by Interrupted's field names (each recorded as text).
    detail: dict
    # The run's version when the finding was read. interrupt() acts only if it is unchanged:
    # a finding is a read, and by the time it is acted on the run may have moved on (another
    # sweeper interrupted it and an operator approved a resume). None: no such check.
    version: int | None = None


def find_expired() -> list[Finding]:
    """Runs whose executing stage lost its worker."""
    rows = (
        Lease.objects.filter(run__status__in=Run.ACTIVE, run__ticket="", expires_at__lte=Now())
        .values("run_id", "holder", "token", "heartbeat_at", "expires_at", "run__version")
        .order_by("run_id")[:500]
    )
    return [
        Finding(
            row["run_id"],
            "the worker stopped renewing its lease",
            {
                "holder": row["holder"],
                "token": row["token"],
                "last_heartbeat": row["heartbeat_at"],
                "lease_expired_at": row["expires_at"],
            },
            row["run__version"],
        )
        for row in rows
    ]


@dataclass(frozen=True)
class JobState:
    """RQ's word on a queued stage job: its status ("queued", "started", "missing", ...) and,
    for a job a worker took, when that worker last showed life for it (RQ's `started_at`,
    or its `last_heartbeat` if later), by the worker's clock."""

    status: str
    alive_at: datetime | None = None


def _job_states(rows: list[dict]) -> list[JobState] | None:
    """What RQ says about each row's queued job, in one round trip (a pipeline of reads): after
    an outage a sweep asks about hundreds of queued jobs, and every worker sweeps. None if
    Redis is away."""
    try:
        found = Job.fetch_many(
            [enqueue.job_id(row["pk"], row["ticket"]) for row in rows],
            connection=enqueue.queue().connection,
        )
    except Exception as exc:  # redis down: we cannot tell, so we say nothing
        log.warning("cannot ask Redis about %s queued jobs: %s", len(rows), exc)
        return None
    states = []
    for job in found:
        if job is None:
            states.append(JobState("missing"))
            continue
        status = job.get_status(refresh=False)
        # JobStatus is a (str, Enum): str() gives "JobStatus.QUEUED", never "queued", which
        # made every job still waiting in the queue look lost. Compare on its value.
        signs = [t for t in (job.started_at, job.last_heartbeat) if t is not None]
        states.append(
            JobState(str(getattr(status, "value", status) or "missing"), max(signs, default=None))
        )
    return states


def find_lost_jobs() -> list[Finding]:
    """Runs whose queued stage job is not going to run."""
    grace = timedelta(seconds=float(settings.RESUMER_QUEUE_GRACE))
    # A job that started must consume its ticket within moments; still pending a lease TTL
    # after its worker took it means that worker died between dequeue and the first write.
    started_grace = grace + timedelta(seconds=leases.ttl_seconds())
    rows = (
        Run.objects.filter(status__in=Run.ACTIVE, queued_at__lte=Now() - grace)
        .exclude(ticket="")
        .values("pk", "ticket", "current_stage", "queued_at", "version")
        .order_by("queued_at")[:500]
    )
    rows = list(rows)
    states = _job_states(rows) if rows else []
    if states is None:
        return []
    findings = []
    for row, job in zip(rows, states, strict=True):
        if job.status in ("queued", "deferred", "scheduled"):
            continue
        if job.status == "started" and _started_recently(row["pk"], job, started_grace):
            continue
        findings.append(
            Finding(
                row["pk"],
                "the queued stage job is gone from Redis"
                if job.status == "missing"
                else f"RQ reports the stage job as {job.status} but it never started the stage",
                {
                    "job_stage": row["current_stage"],
                    "job_state": job.status,
                    "queued_at": row["queued_at"],
                    **({"job_started_at": job.alive_at} if job.alive_at else {}),
                },
                row["version"],
            )
        )
    return findings


def _started_recently(run_pk: int, job: JobState, started_grace: timedelta) -> bool:
    """Whether a worker took the job less than `started_grace` ago.

    Measured from when the worker took it, never from when it was queued: after an outage
    hundreds of runs wait in the queue for a few workers, and a job queued long ago that a
    worker took a moment ago is healthy. RQ stamps `started_at` with the worker's clock, so
    this compares two machines' clocks; NTP keeps them far closer than the grace (lease TTL +
    queue grace, 40 s by default). A job without the stamp (it should not happen) falls back
    to the run's queued_at, by the database's clock."""
    if job.alive_at is not None:
        return datetime.now(UTC) - job.alive_at < started_grace
    return Run.objects.filter(pk=run_pk, queued_at__gt=Now() - started_grace).exists()


def interrupt(finding: Finding, *, takeover: bool = False) -> bool:
    """Take the lease from the vanished worker (bumping the token fences it should it wake),
    record INTERRUPTED with what is known, and hand the run to a human.

    `takeover` is for a caller that saw the worker die (it reaped the process) and need not
    wait for the lease to run out.

    After an outage every worker's sweeper reads the same hundreds of findings. The first one
    to act on a run moves its version; the others see that here in one primary-key read and
    leave the run alone, without taking its lease (a token bump and two writes each) only to
    find the finding stale under the row lock. The row lock's check below stays the one that
    decides: a run can still move between this read and the lease."""
    if _acted_on(finding):
        return False
    try:
        with leases.writing(finding.run_pk, SWEEPER, takeover=takeover) as token:
            writer = Writer(finding.run_pk, token, SWEEPER)
            run = Run.objects.select_for_update().get(pk=finding.run_pk)
            if not run.is_active:
                return False
            if finding.version is not None and run.version != finding.version:
                # Something was appended since the finding was read (e.g. another sweeper's
                # INTERRUPTED and an approved resume, which leaves the run active again with
                # a fresh ticket): the finding is stale; the next round reads afresh.
                return False
            interrupted = Interrupted(
                stage=run.current_stage,
                reason=finding.reason,
                **{k: str(v) for k, v in finding.detail.items()},
                last_seq=run.last_seq,
                **_call_in_flight(run),
            )
            append(
                writer,
                interrupted,
                move=RunMove(Run.Status.INTERRUPTED, ticket="", queued_at=None),
            )
    except leases.LeaseBusy:
        return False  # a worker took it meanwhile: not lost after all
    log.warning("run-%s interrupted: %s", finding.run_pk, finding.reason)
    return True


def _acted_on(finding: Finding) -> bool:
    """Whether the run moved since the finding was read (another sweeper interrupted it, a
    worker went on, it ended): one read by primary key."""
    fresh = Run.objects.filter(pk=finding.run_pk, status__in=Run.ACTIVE)
    if finding.version is not None:
        fresh = fresh.filter(version=finding.version)
    return not fresh.exists()


def _call_in_flight(run: Run) -> dict[str, str]:
    """The call the worker was making when it went away, if its last event is that call's
    TOOL_CALLED (every call writes one before it starts): "worker lost during upload-cover"
    is what an operator needs to read first. One indexed read of the run's last event (a
    payload stored as an artifact keeps its call and tool in its summary)."""
    last = (
        Event.objects.filter(run=run, seq=run.last_seq, type=Event.Type.TOOL_CALLED)
        .only("type", "payload")
        .first()
    )
    if last is None:
        return {}
    called = read(last)
    return {"call": called.call, "tool": called.tool}


def sweep() -> list[int]:
    """One pass; returns the pks of the runs it interrupted.

    The findings are taken in random order: after an outage every worker's sweeper finds the
    same hundreds of runs at once, and walking them in the same order made one sweeper do the
    work while the others followed it, skipping what it had just taken (interrupt() is a
    compare-and-set, so whichever sweeper comes first acts; the rest see the run's version
    moved in one read and leave its lease alone)."""
    done = []
    findings = find_expired() + find_lost_jobs()
    random.shuffle(findings)
    for finding in findings:
        if interrupt(finding):
            done.append(finding.run_pk)
    return done


def interrupt_lost_mid_stage(writer: Writer, stage_name: str) -> bool:
    """The connection died while `writer`'s stage ran, and the database answers again.
    Nothing of the stage goes on (an operator decides, from the plan, as after a worker
    crash): the run is interrupted now, saying why; False when another writer has taken it
    over meanwhile. First the head is checked: writes this worker was told were committed
    may be gone with a database crash (HeadLost), and the interruption says so."""
    reason = "the database connection was lost while the stage ran"
    try:
        check_head(writer)
    except HeadLost as exc:
        log.warning("%s", exc)
        reason = f"{reason}; {exc}"
    version = (
        Run.objects.filter(pk=writer.run_id, lease__token=writer.token)
        .values_list("version", flat=True)
        .first()
    )
    if version is None:
        return False
    interrupt(Finding(writer.run_id, reason, {"job_stage": stage_name}, version), takeover=True)
    return True

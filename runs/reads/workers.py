"""The workers page: the live RQ workers of the configured queue, as RQ's own registry in
Redis records them, beside the leases the database says each one holds.

A GET reads Redis and the database and nothing else: no worker, job or target is asked
anything, nothing is written (not even the tidying RQ's own readers do in Redis). The two are read one after the other, not in one snapshot: a
stage that starts or ends between the reads may show on one side only for a moment.

A worker takes a run's lease under its holder name, "worker:<hostname>:<pid>" (runs/ids.py,
engine.worker_identity), and RQ records each worker's hostname and pid: that is how a lease
is matched to its worker. A lease held under a worker's name that no live worker answers to
is listed apart: its worker died (the sweeper interrupts its run once the lease runs out), or
it works another queue than this process's.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import datetime

import redis
from django.conf import settings
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now
from rq.executions import WORKER_EXECUTIONS_KEY_TEMPLATE, Execution
from rq.utils import as_text, parse_composite_key, utcparse
from rq.worker import Worker
from rq.worker_registration import WORKERS_BY_QUEUE_KEY

from runs import enqueue, ids
from runs.models import Lease, Run

# More leases than this held by workers at once is a fleet this page is not for; it says so.
LEASES_SHOWN = 500


@dataclass(frozen=True)
class WorkerLease:
    """One run's lease, held under a worker's name (the Lease row and its run's stage)."""

    run_id: int
    stage: str
    status: str
    holder: str
    token: int
    acquired_at: datetime | None
    heartbeat_at: datetime | None
    expires_at: datetime
    # Run out on the database's clock, the one leases are kept on.
    expired: bool

    @property
    def public_id(self) -> str:
        return ids.run_id(self.run_id)


@dataclass
class LiveWorker:
    """One worker as RQ's registry has it, and the leases held under its name."""

    name: str
    pid: int | None
    hostname: str
    state: str
    current_job: str
    last_heartbeat: datetime | None
    birth: datetime | None
    holder: str
    leases: list[WorkerLease] = field(default_factory=list)

    @property
    def gone(self) -> bool:
        """Registered on this host, and its process is not running: a worker killed without
        saying so stays in RQ's registry until its key expires (a busy one's lives as long
        as its job's timeout), listed as busy with the job it died in."""
        if self.pid is None or self.hostname != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)  # signal 0: is there such a process (nothing is sent)
        except ProcessLookupError:
            return True
        except PermissionError:  # there is one, another user's
            return False
        return False


@dataclass
class WorkersPage:
    queue: str
    workers: list[LiveWorker]
    # Holder name → the leases held under it by no live worker of this queue.
    unmatched: dict[str, list[WorkerLease]]
    # Redis did not answer: no worker can be listed, the leases still are.
    redis_error: str = ""
    truncated: bool = False
    limit: int = LEASES_SHOWN


def held_leases() -> list[WorkerLease]:
    """The leases held under a worker's name, one query: from the active runs (a stage job
    runs only while its run is running or resuming; the run_status_idx prefix) to their
    leases by key. A released lease's holder is empty."""
    rows = (
        Lease.objects.filter(run__status__in=Run.ACTIVE, holder__startswith=ids.WORKER_PREFIX)
        .annotate(expired=ExpressionWrapper(Q(expires_at__lte=Now()), output_field=BooleanField()))
        .values_list(
            "run_id",
            "run__current_stage",
            "run__status",
            "holder",
            "token",
            "acquired_at",
            "heartbeat_at",
            "expires_at",
            "expired",
        )
        .order_by("run_id")[: LEASES_SHOWN + 1]
    )
    return [WorkerLease(*row) for row in rows]


def live_workers() -> list[LiveWorker]:
    """The workers RQ registered on the configured queue, read as RQ's own Worker.all() reads
    them but without its tidying (it removes a dead worker's key and expired executions from
    its sets as it reads): a GET only reads. Three round trips, whatever the number of workers.

    A worker in the set whose hash is gone died without saying so (the hash expires with its
    heartbeat); it is not live, and is not listed."""
    queue = enqueue.queue()
    conn = queue.connection
    prefix = Worker.redis_worker_namespace_prefix
    keys = sorted(as_text(key) for key in conn.smembers(WORKERS_BY_QUEUE_KEY % queue.name))
    names = [key[len(prefix) :] for key in keys]
    with conn.pipeline(transaction=False) as pipe:
        for key, name in zip(keys, names, strict=True):
            pipe.hgetall(key)
            pipe.smembers(WORKER_EXECUTIONS_KEY_TEMPLATE.format(name))
        replies = pipe.execute()
    rows, executions = [], []
    for name, data, members in zip(names, replies[::2], replies[1::2], strict=True):
        if data:
            rows.append(_worker(name, {as_text(k): as_text(v) for k, v in data.items()}))
            executions.append(sorted(parse_composite_key(as_text(m)) for m in members))
    _current_jobs(conn, rows, executions)
    return rows


def _worker(name: str, data: dict[str, str]) -> LiveWorker:
    pid = int(data["pid"]) if data.get("pid", "").isdigit() else None
    hostname = data.get("hostname", "")
    return LiveWorker(
        name=name,
        pid=pid,
        hostname=hostname,
        state=data.get("state", "?"),
        current_job="",
        last_heartbeat=utcparse(data["last_heartbeat"]) if data.get("last_heartbeat") else None,
        birth=utcparse(data["birth"]) if data.get("birth") else None,
        holder=ids.worker_holder(hostname, pid) if pid else "",
    )


def _current_jobs(conn, rows: list[LiveWorker], executions: list[list[tuple[str, str]]]) -> None:
    """Each worker's current job: an execution in its index whose own hash still exists (an
    expired one is a job it no longer runs). One round trip."""
    with conn.pipeline(transaction=False) as pipe:
        for found in executions:
            for job_id, execution_id in found:
                pipe.exists(Execution(execution_id, job_id, connection=conn).key)
        alive = iter(pipe.execute())
    for row, found in zip(rows, executions, strict=True):
        running = [job_id for job_id, _ in found if next(alive)]
        row.current_job = running[0] if running else ""


def workers_page() -> WorkersPage:
    leases = held_leases()
    truncated = len(leases) > LEASES_SHOWN
    leases = leases[:LEASES_SHOWN]
    try:
        workers = live_workers()
        error = ""
    except redis.exceptions.RedisError as exc:
        workers, error = [], str(exc) or type(exc).__name__
    by_holder = {w.holder: w for w in workers if w.holder}
    unmatched: dict[str, list[WorkerLease]] = {}
    for lease in leases:
        worker = by_holder.get(lease.holder)
        if worker is not None:
            worker.leases.append(lease)
        else:
            unmatched.setdefault(lease.holder, []).append(lease)
    return WorkersPage(settings.RESUMER_QUEUE, workers, unmatched, error, truncated)

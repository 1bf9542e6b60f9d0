"""The RQ worker class Resumer runs: RQ's SimpleWorker plus the lease sweeper.

SimpleWorker executes jobs in the worker process itself, so a fault-injected crash (SIGKILL)
kills the worker the way an OOM kill would, and Django's connections are never shared across
a fork. The sweeper thread is what turns a dead worker's run into *interrupted*: it reads the
database's leases, so detection does not wait on RQ's own abandoned-job cleanup. The same
thread closes notification windows and releases scheduled jobs (runs/notify.py).

    manage.py rqworker default --worker-class runs.worker.ResumerWorker
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from pathlib import Path

import redis
from django.conf import settings
from django.db import connection
from rq.scheduler import RQScheduler
from rq.worker import SimpleWorker

from runs import notify
from runs.execution import outage, sweeper
from runs.gates import timeouts as gate_timeouts

log = logging.getLogger("runs.worker")


class SweeperThread(threading.Thread):
    """Every sweep interval: crash detection, then the notification windows that are over,
    then the RQ jobs whose scheduled time has come (delivery retries waiting out their
    backoff). Each step fails on its own and is tried again next round."""

    def __init__(self, interval: float, worker: SimpleWorker) -> None:
        super().__init__(daemon=True, name="resumer-sweeper")
        self.interval = interval
        self.stopping = threading.Event()
        self.worker = worker
        self.scheduler: RQScheduler | None = None

    def run(self) -> None:
        steps = [
            ("sweep", sweeper.sweep),
            ("gate time-outs", gate_timeouts.sweep),
            ("notification close", notify.close_due),
            ("scheduled jobs", self.release_scheduled),
        ]
        while not self.stopping.wait(self.interval):
            for name, step in steps:
                try:
                    step()
                except Exception as exc:  # database or Redis away: try again next round
                    log.warning("%s failed: %s", name, exc)
                    connection.close()
        connection.close()

    def release_scheduled(self) -> None:
        """Move due scheduled jobs onto their queues. This is the step RQ's scheduler takes
        (`rqworker --with-scheduler`), taken here instead: RQ's runs in a forked process that
        a SIGKILLed worker leaves running behind it. RQ's per-queue scheduler lock still keeps
        two workers from moving the same jobs at once."""
        if self.scheduler is None:
            self.scheduler = RQScheduler(
                self.worker.queues,
                connection=self.worker.connection,
                serializer=self.worker.serializer,
            )
        if self.scheduler.acquire_locks():
            try:
                self.scheduler.enqueue_scheduled_jobs()
            finally:
                self.scheduler.release_locks()


class ResumerWorker(SimpleWorker):
    def work(self, *args, **kwargs):  # type: ignore[override]
        thread = SweeperThread(float(settings.RESUMER_SWEEP_INTERVAL), self)
        thread.start()
        try:
            return super().work(*args, **kwargs)
        finally:
            thread.stopping.set()

    def dequeue_job_and_maintain_ttl(self, timeout, max_idle_time=None):  # type: ignore[override]
        """Take a job only while the database answers. A job taken while it does not goes
        back to the front of its queue untouched (its run's ticket still pending), and the
        worker waits for the database (runs/execution/outage.py): run by then, every job
        would fail at once and its run would wait for an operator though it never started."""
        while True:
            taken = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
            if taken is None or outage.ready_for_job():
                return taken
            job, queue = taken
            with self.connection.pipeline() as pipe:
                pipe.lrem(queue.intermediate_queue_key, 1, job.id)
                queue.push_job_id(job.id, pipeline=pipe, at_front=True)
                pipe.execute()
            outage.wait_for_database(f"worker {self.name}", tick=self._alive)

    def _alive(self) -> None:
        # Seen alive by RQ while it waits; Redis may be away too, which its loop handles.
        with contextlib.suppress(redis.exceptions.RedisError):
            self.heartbeat()


def command(*, queue: str | None = None, burst: bool = False) -> list[str]:
    """The command line that runs one Resumer worker (`manage.py work`, the tests and the
    fault matrix all start workers with it)."""
    cmd = [
        sys.executable,
        str(Path(settings.BASE_DIR) / "manage.py"),
        "rqworker",
        queue or settings.RESUMER_QUEUE,
        "--worker-class",
        f"{ResumerWorker.__module__}.{ResumerWorker.__qualname__}",
    ]
    return [*cmd, "--burst"] if burst else cmd

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
import time
from collections.abc import Iterator
from pathlib import Path

import redis
from django.conf import settings
from django.db import connection
from rq.job_lifecycle import call_exception_handlers
from rq.scheduler import RQScheduler
from rq.worker import SimpleWorker

from runs import notify
from runs.execution import outage, sweeper
from runs.execution.engine import warm_up
from runs.gates import timeouts as gate_timeouts
from runs.models import IdempotentRequest

log = logging.getLogger("runs.worker")


class SweeperThread(threading.Thread):
    """Every sweep interval: crash detection, then the notification windows that are over,
    then the RQ jobs whose scheduled time has come (delivery retries waiting out their
    backoff), then the API's Idempotency-Keys past their retention. Each step fails on its
    own and is tried again next round."""

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
            ("idempotency keys", IdempotentRequest.purge),
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
                # RQ sets its logger's level here, over the settings' LOGGING: at INFO it
                # says "Acquired scheduler lock" at every sweep of every worker.
                logging_level=logging.WARNING,
            )
        if self.scheduler.acquire_locks():
            try:
                self.scheduler.enqueue_scheduled_jobs()
            finally:
                self.scheduler.release_locks()


# Seconds between pings while Redis is away: the first wait and the longest (as outage.py's
# waits for the database, short enough that work goes on soon after Redis is back).
REDIS_FIRST_WAIT = 0.25
REDIS_LONGEST_WAIT = 5.0


class ResumerWorker(SimpleWorker):
    """RQ's SimpleWorker, the sweeper thread beside it, and a worker that rides out a Redis
    outage. RQ retries an idle worker's blocking pop, but a job that ends while Redis is away
    fails in RQ's own bookkeeping after the job (its heartbeat, its registries), and RQ's loop
    quits on any error. The job's work is in the database, fenced by its lease, so nothing is
    lost with that bookkeeping: the worker waits for Redis and takes the next job instead of
    leaving the fleet one process short until something restarts it."""

    def work(self, *args, **kwargs):  # type: ignore[override]
        warm_up()
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
            taken = self._dequeue(timeout, max_idle_time)
            if taken is None or outage.ready_for_job():
                return taken
            job, queue = taken
            with self.connection.pipeline() as pipe:
                pipe.lrem(queue.intermediate_queue_key, 1, job.id)
                queue.push_job_id(job.id, pipeline=pipe, at_front=True)
                pipe.execute()
            outage.wait_for_database(f"worker {self.name}", tick=self._alive)

    def _dequeue(self, timeout, max_idle_time):
        """RQ's dequeue, which waits out an outage only inside its loop around the pop: one
        that begins at the command before it (the worker's state set to idle) made RQ's loop
        quit, and the fleet ran one worker short."""
        while True:
            with self.riding_out_redis("as the worker went idle"):
                return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)

    def handle_exception(self, job, *exc_info):  # type: ignore[override]
        """A notification's delivery that failed is retried by design (RQ's Retry, its
        backoff): one warning line, not RQ's error with a traceback, which read as a crash."""
        if isinstance(exc_info[1], notify.DeliveryFailed):
            log.warning("job %s: %s; retried as its backoff says", job.id, exc_info[1])
            call_exception_handlers(self._exc_handlers, job, *exc_info)
            return
        super().handle_exception(job, *exc_info)

    def execute_job(self, job, queue):  # type: ignore[override]
        with self.riding_out_redis(f"as job {job.id} ended"):
            super().execute_job(job, queue)

    # The loop's other Redis commands between jobs: an outage that begins there.
    def check_for_suspension(self, burst: bool) -> None:
        with self.riding_out_redis("between jobs"):
            super().check_for_suspension(burst)

    def run_maintenance_tasks(self) -> None:
        with self.riding_out_redis("during RQ's maintenance"):
            super().run_maintenance_tasks()

    @contextlib.contextmanager
    def riding_out_redis(self, when: str) -> Iterator[None]:
        try:
            yield
        except redis.exceptions.ConnectionError as exc:
            log.warning("Redis went away %s (%s); waiting for it", when, exc)
            self.wait_for_redis()

    def wait_for_redis(self) -> None:
        """Ping until Redis answers, backing off. The loop's next heartbeat registers the
        worker again if Redis came back empty."""
        wait = REDIS_FIRST_WAIT
        while True:
            try:
                self.connection.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(wait)
                wait = min(wait * 2, REDIS_LONGEST_WAIT)
        log.warning("Redis answers again; worker %s goes on", self.name)

    def heartbeat(self, timeout=None, pipeline=None):  # type: ignore[override]
        """RQ's heartbeat in one round trip, and a worker that registers again when Redis
        came back empty (a restart without persistence forgets every worker): monitoring and
        RQ's cleanup then see it alive. Whether it is registered is asked in the same round
        trip. A heartbeat field that is new would not do: RQ's pipelined heartbeat at a job's
        start, which redis-py retries through a short outage, can land on the empty Redis
        first and leave the field there (tests/faults/restart_pipeline.py)."""
        if pipeline is not None:
            return super().heartbeat(timeout, pipeline)
        while True:
            # RQ's loop beats right after each job, outside any retry of its own: an outage
            # that begins there is waited out here.
            try:
                with self.connection.pipeline() as pipe:
                    super().heartbeat(timeout, pipe)
                    pipe.sismember(self.redis_workers_keys, self.key)
                    registered = pipe.execute()[-1]
                break
            except redis.exceptions.ConnectionError as exc:
                log.warning("Redis went away at a heartbeat (%s); waiting for it", exc)
                self.wait_for_redis()
        if not registered:
            self.connection.delete(self.key)
            self.register_birth()

    def _alive(self) -> None:
        # Seen alive by RQ while it waits for the database; a Redis away too is waited for by
        # heartbeat().
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

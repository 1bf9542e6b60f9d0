"""The sweeper's step that moves due scheduled jobs (runs/execution/worker.py) under RQ's
scheduler lock: it moves them, and says nothing at INFO each time it takes the lock (a line
per sweep per worker, which an operator read as RQ's own scheduler being on)."""

from __future__ import annotations

import logging
from datetime import timedelta

import django_rq
from django.conf import settings
from rq import Queue
from rq.worker import SimpleWorker

from runs.execution.worker import SweeperThread


def _noop() -> None:
    return None


def test_a_due_scheduled_job_is_queued_without_an_info_line_per_sweep(redis_conn, caplog):
    queue = Queue(settings.RESUMER_QUEUE, connection=redis_conn)
    job = queue.enqueue_in(timedelta(seconds=-1), _noop)
    sweeper = SweeperThread(1, SimpleWorker([queue], connection=redis_conn))

    with caplog.at_level(logging.INFO):
        sweeper.release_scheduled()
        sweeper.release_scheduled()

    assert job.id in django_rq.get_queue(settings.RESUMER_QUEUE).job_ids
    assert "Acquired scheduler lock" not in caplog.text

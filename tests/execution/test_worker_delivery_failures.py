"""A notification delivery that failed is retried by design: the worker says so in one
warning line, not with RQ's error and traceback, which read as a crash; any other failure of
a job is still RQ's error with its traceback."""

from __future__ import annotations

import logging
import sys

from django.conf import settings
from rq import Queue
from rq.job import Job

from runs.execution.worker import ResumerWorker
from runs.notify import DeliveryFailed


def _deliver() -> None:
    return None


def _raised(exc: Exception):
    try:
        raise exc
    except Exception:
        return sys.exc_info()


def _worker_and_job(redis_conn) -> tuple[ResumerWorker, Job]:
    queue = Queue(settings.RESUMER_QUEUE, connection=redis_conn)
    return ResumerWorker([queue], connection=redis_conn), Job.create(
        _deliver, connection=redis_conn
    )


def test_a_failed_delivery_is_one_warning_without_a_traceback(redis_conn, caplog):
    worker, job = _worker_and_job(redis_conn)

    with caplog.at_level(logging.DEBUG):
        worker.handle_exception(job, *_raised(DeliveryFailed("webhook attempt 1: refused")))

    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [(r.levelname, r.getMessage()) for r in said] == [
        ("WARNING", f"job {job.id}: webhook attempt 1: refused; retried as its backoff says")
    ]


def test_any_other_failure_is_still_an_error_with_its_traceback(redis_conn, caplog):
    worker, job = _worker_and_job(redis_conn)

    with caplog.at_level(logging.DEBUG):
        worker.handle_exception(job, *_raised(RuntimeError("boom")))

    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "Traceback" in errors[0].getMessage()

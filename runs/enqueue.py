"""Putting Resumer's jobs on the RQ queue: the bottom of the house.

Everyone who queues work calls this module (the engine for the next stage, the ledger's
stop receivers for a plan, notify for deliveries, the dashboard for a group approval), and it
imports nothing of Resumer: it names the jobs by dotted path (runs/jobs.py), which RQ
imports in the worker. So queueing never ties the caller to everything a job calls.

May import: nothing of runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import django_rq
from django.conf import settings
from rq import Queue, Retry

log = logging.getLogger("runs.enqueue")

EXECUTE_STAGE = "runs.jobs.execute_stage"
COMPUTE_PLAN = "runs.jobs.compute_plan"
APPROVE_BATCH = "runs.jobs.approve_batch"
DELIVER_NOTIFICATION = "runs.jobs.deliver_notification"

# One queue (so one Redis client and its connection pool) per queue name and Redis URL in a
# process. django_rq.get_queue() builds a new client each call: every stage dispatch, plan job
# and sweeper question paid a TCP connect and handshake. Keyed by URL so a test that points
# RQ_QUEUES elsewhere gets a queue there.
_queues: dict[tuple[str, str], Any] = {}


def queue() -> Queue:
    name = settings.RESUMER_QUEUE
    key = (name, str(settings.RQ_QUEUES.get(name, {}).get("URL", "")))
    found = _queues.get(key)
    if found is None:
        found = _queues[key] = django_rq.get_queue(name)
    return found


def job_id(run_pk: int, ticket: str) -> str:
    # The ticket is in the id, so a stage queued twice for one ticket is one RQ job.
    return f"run-{run_pk}-{ticket}"


def enqueue_stage(run_pk: int, stage: str, ticket: str) -> None:
    queue().enqueue(
        EXECUTE_STAGE,
        run_pk,
        stage,
        ticket,
        job_id=job_id(run_pk, ticket),
        result_ttl=3600,
        failure_ttl=24 * 3600,
    )


def dispatch(run_pk: int, stage: str, ticket: str) -> bool:
    """Put the stage job on the queue. A Redis failure is logged, not raised: the ticket stays
    pending and the sweeper turns a job Redis never got into an interrupted run."""
    try:
        enqueue_stage(run_pk, stage, ticket)
        return True
    except Exception as exc:  # redis.exceptions.ConnectionError and friends
        log.warning("could not queue run-%s/%s: %s", run_pk, stage, exc)
        return False


def enqueue_plan(run_pk: int) -> None:
    queue().enqueue(COMPUTE_PLAN, run_pk, result_ttl=600, failure_ttl=24 * 3600)


def enqueue_batch(batch_id: str, runs: int) -> None:
    # Each approval plans afresh and may wait on a slow target: give the job 10 s per run on
    # top of the usual timeout, so a big batch is not cut short.
    queue().enqueue(
        APPROVE_BATCH,
        batch_id,
        job_id=f"batch-{batch_id}",
        job_timeout=int(
            settings.RQ_QUEUES.get(settings.RESUMER_QUEUE, {}).get("DEFAULT_TIMEOUT", 600)
        )
        + 10 * runs,
        result_ttl=3600,
        failure_ttl=24 * 3600,
        # Queued from inside the transaction that records the batch when the API's
        # Idempotency-Key commits the action with its answer: a job that starts before that
        # commit finds no row, and is tried again (a batch approves nothing twice).
        retry=Retry(max=3, interval=[1, 5, 30]),
    )


def enqueue_deliveries(
    notification_pk: int,
    channels: Sequence[str],
    *,
    backoff: Sequence[int],
    timeout: int,
    on: Queue | None = None,
) -> None:
    """One delivery job per channel, retried by RQ after each interval of `backoff`, queued
    in one pipeline (MULTI/EXEC): every target's job is queued, or none is."""
    retry = Retry(max=len(backoff), interval=list(backoff)) if backoff else None
    (on or queue()).enqueue_many(
        [
            Queue.prepare_data(
                DELIVER_NOTIFICATION,
                args=(notification_pk, channel),
                job_id=f"notify-{notification_pk}-{channel}",
                retry=retry,
                timeout=timeout,
                result_ttl=24 * 3600,
                failure_ttl=7 * 24 * 3600,
            )
            for channel in channels
        ]
    )

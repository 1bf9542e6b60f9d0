"""RQ jobs. They take primary keys and stay thin: the work is in engine.py, stored_plans.py
and notify.py."""

from __future__ import annotations

from typing import Any

import django_rq
from django.conf import settings
from django.db import close_old_connections, connections

from runs import notify
from runs.execution import engine, hooks


def job_id(run_pk: int, ticket: str) -> str:
    # The ticket is in the id, so a stage queued twice for one ticket is one RQ job.
    return f"run-{run_pk}-{ticket}"


# One queue (so one Redis client and its connection pool) per queue name and Redis URL in a
# process. django_rq.get_queue() builds a new client each call: every stage dispatch, plan job
# and sweeper question paid a TCP connect and handshake. Keyed by URL so a test that points
# RQ_QUEUES elsewhere gets a queue there.
_queues: dict[tuple[str, str], Any] = {}


def queue():
    name = settings.RESUMER_QUEUE
    key = (name, str(settings.RQ_QUEUES.get(name, {}).get("URL", "")))
    found = _queues.get(key)
    if found is None:
        found = _queues[key] = django_rq.get_queue(name)
    return found


def enqueue_stage(run_pk: int, stage: str, ticket: str) -> None:
    queue().enqueue(
        execute_stage,
        run_pk,
        stage,
        ticket,
        job_id=job_id(run_pk, ticket),
        result_ttl=3600,
        failure_ttl=24 * 3600,
    )


def execute_stage(run_pk: int, stage: str, ticket: str) -> str:
    close_old_connections()
    try:
        # RQ pickles the result: the plain word reads anywhere without importing Resumer.
        return engine.execute(run_pk, stage, ticket, hooks=hooks.installed()).value
    finally:
        # The worker's process lives on between jobs; never carry a connection across them.
        connections.close_all()


def enqueue_plan(run_pk: int) -> None:
    queue().enqueue(compute_plan, run_pk, result_ttl=600, failure_ttl=24 * 3600)


def compute_plan(run_pk: int) -> str:
    """Compute and store a stopped run's plan (it asks the run's targets)."""
    from runs.models import Run
    from runs.planning import stored_plans

    close_old_connections()
    try:
        run = Run.objects.filter(pk=run_pk).first()
        if run is None:
            return "no-such-run"
        plan = stored_plans.refresh(run)
        return plan.fingerprint[:12]
    finally:
        connections.close_all()


def deliver_notification(notification_pk: int, channel: str) -> str:
    """One attempt to send a notification to one target (notify.deliver); queued with RQ's
    Retry, so a failed attempt (it raises) is tried again after the backoff."""
    close_old_connections()
    try:
        return notify.deliver(notification_pk, channel)
    finally:
        connections.close_all()


def enqueue_batch(batch_id: str, runs: int) -> None:
    # Each approval plans afresh and may wait on a slow target: give the job 10 s per run on
    # top of the usual timeout, so a big batch is not cut short.
    queue().enqueue(
        approve_batch,
        batch_id,
        job_id=f"batch-{batch_id}",
        job_timeout=int(
            settings.RQ_QUEUES.get(settings.RESUMER_QUEUE, {}).get("DEFAULT_TIMEOUT", 600)
        )
        + 10 * runs,
        result_ttl=3600,
        failure_ttl=24 * 3600,
    )


def approve_batch(batch_id: str) -> str:
    """Carry out a group approval the dashboard recorded (triage.run_batch)."""
    from runs.planning import triage

    close_old_connections()
    try:
        return triage.run_batch(batch_id).state
    finally:
        connections.close_all()

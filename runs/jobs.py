"""RQ jobs: the entry points runs/enqueue.py names by dotted path. They take primary keys
and stay thin: the work is in the engine, the stored plans, triage and notify. Nothing in
Resumer imports this module but the worker (RQ, by the job's name), so it may import
everything."""

from __future__ import annotations

from django.db import close_old_connections, connections

from runs import notify
from runs.execution import engine, hooks, outage
from runs.models import Run
from runs.planning import stored_plans, triage


def execute_stage(run_pk: int, stage: str, ticket: str) -> str:
    # No close_old_connections() here: the worker checked this connection a moment ago to see
    # that the database answers (ResumerWorker), and closing it would cost a connect per job.
    try:
        # RQ pickles the result: the plain word reads anywhere without importing Resumer.
        return engine.execute(run_pk, stage, ticket, hooks=hooks.installed()).value
    finally:
        outage.keep_for_next_job()


def compute_plan(run_pk: int) -> str:
    """Compute and store a stopped run's plan (it asks the run's targets)."""
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


def approve_batch(batch_id: str) -> str:
    """Carry out a group approval the dashboard recorded (triage.run_batch)."""
    close_old_connections()
    try:
        return triage.run_batch(batch_id).state
    finally:
        connections.close_all()

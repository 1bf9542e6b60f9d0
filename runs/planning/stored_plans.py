"""Stored plans: the reconcile plan a page shows, computed when it can change, never on a GET.

A plan asks targets reconcile questions, so a viewer reloading a page must not compute one.
It is computed when a run stops (a status a human resolves), when a supervisor's ledger edit
changes the facts, and when an operator asks the targets again; each time it replaces the run's
StoredPlan. An approval never trusts the stored plan: it computes a fresh one and compares
fingerprints (runs/planning/resume.py).
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from runs import enqueue
from runs.models import Run, StoredPlan
from runs.planning.grouping import group_fingerprint
from runs.planning.planner import Plan, compute_plan
from runs.planning.replay import UNSETTLED

log = logging.getLogger("runs.stored_plans")


def unsettled(plan: Plan) -> dict[str, str]:
    """{"stage/call": action} for the plan's calls whose outcome the ledger does not know."""
    return {f"{e.stage}/{e.call_id}": e.action for e in plan.effects if e.status in UNSETTLED}


def store(plan: Plan) -> StoredPlan | None:
    """Keep `plan` as the run's stored plan unless a plan of a newer run version is stored
    already (two workers computing plans of one run: the older answer never wins). Returns
    the row now stored, or None when `plan` lost."""
    data = plan.to_dict()
    values = {
        "fingerprint": plan.fingerprint,
        "run_version": plan.run_version,
        "computed_at": Now(),
        "data": data,
        "shape": group_fingerprint(data),
        "resumable": plan.resumable,
        "blocked": plan.blocked,
        "drifted": bool(plan.drift),
        "resume_money": Decimal(plan.cost_resume.money),
        "fresh_money": Decimal(plan.cost_fresh.money),
        "resume_calls": plan.cost_resume.tool_calls,
        "fresh_calls": plan.cost_fresh.tool_calls,
        "unsettled": unsettled(plan),
    }
    with transaction.atomic():
        updated = StoredPlan.objects.filter(
            run_id=plan.run_pk, run_version__lte=plan.run_version
        ).update(**values)
        if not updated and not _first(plan, values):
            return None
        _rank(plan)
    return StoredPlan.objects.get(run_id=plan.run_pk)


def _first(plan: Plan, values: dict[str, Any]) -> bool:
    """Store the run's first plan. Two processes may both find no row (a worker's plan job and
    an operator's "Check targets again"): the second insert waits for the first on the unique
    key, fails, and then goes the way of any update, the newer version winning. The savepoint
    keeps the caller's transaction usable after that failure."""
    if StoredPlan.objects.filter(run_id=plan.run_pk).exists():
        return False
    try:
        with transaction.atomic():
            StoredPlan.objects.create(run_id=plan.run_pk, **values)
        return True
    except IntegrityError:
        return bool(
            StoredPlan.objects.filter(run_id=plan.run_pk, run_version__lte=plan.run_version).update(
                **values
            )
        )


def _rank(plan: Plan) -> None:
    """The inbox's severity follows what the plan knows (Run.severity): blocked while the plan
    of the run as it stands is; else a resumed run's stop ranks as a resume that failed, above
    fresh failures; else what its status says. Only at the run's current version and while it
    is stopped: a run that moved on has the severity the append path gave it."""
    stopped = Run.objects.filter(pk=plan.run_pk, version=plan.run_version, status__in=Run.RESUMABLE)
    for status, deviated, attempt, parent in stopped.values_list(
        "status", "deviated", "attempt", "parent_id"
    ):
        resumed = attempt > 0 or parent is not None
        severity = Run.severity_for(status, deviated, resumed)
        stopped.update(severity=Run.Severity.BLOCKED if plan.blocked else severity)


def refresh(run: Run) -> Plan:
    """Compute the run's plan now (asking its targets) and store it."""
    plan = compute_plan(run)
    store(plan)
    return plan


def shown(run: Run) -> tuple[Plan, StoredPlan] | None:
    """The stored plan of a run, as a value, with its row (when and at which version)."""
    stored = StoredPlan.objects.filter(run=run).first()
    if stored is None:
        return None
    return Plan.from_dict(stored.data), stored


def on_run_stopped(sender: Any, run_pk: int, status: str | None, **kwargs: Any) -> None:
    """Receiver of signals.run_stopped: a worker computes the plan of a run waiting for a
    human (jobs.compute_plan). Not here: the process that stopped the run still holds its
    lease, and a plan waits on its targets. A queue that cannot be reached costs only the
    stored plan: the page then offers to ask the targets again."""
    if status not in Run.RESUMABLE:
        return  # resumed work that departed from its plan goes on; it has no plan to show
    try:
        enqueue.enqueue_plan(run_pk)
    except Exception as exc:  # redis.exceptions.ConnectionError and friends
        log.warning("could not queue the plan of run-%s: %s", run_pk, exc)

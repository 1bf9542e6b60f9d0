"""What every endpoint does before its one domain call: check the role, find the run or the
gate that the path names (a 404 problem when it names nothing, whatever the text: huge
numbers, other scripts' digits). Who acted is `ids.user_actor(request.user)`, as on every
other face."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest

from runs import ids
from runs.api.problems import Problem
from runs.models import Run
from runs.reads.inbox import StopFacts
from runs.reads.run_page import get_run


def require(request: HttpRequest, check: Callable[[Any], bool]) -> None:
    """The role a page asks for this, or 403."""
    if not check(request.user):
        raise Problem(403, "your role does not allow this", kind="forbidden")


def run_pk(run_id: str) -> int:
    pk = ids.parse_run_id(run_id, bare=True)
    if pk is None:
        raise Problem(404, f"{run_id[:40]!r} is not a run id (e.g. run-123)", kind="not-found")
    return pk


def find_run(run_id: str) -> Run:
    run = get_run(run_pk(run_id))
    if run is None:
        raise Problem(404, f"there is no {run_id[:40]}", kind="not-found")
    return run


def _stop(facts: StopFacts | None) -> dict[str, Any] | None:
    if facts is None:
        return None
    plan = facts.plan
    figures = None
    if plan is not None:
        figures = {
            "run_version": plan.run_version,
            "blocked": plan.blocked,
            "drifted": plan.drifted,
            "resume_money": plan.resume_money,
            "fresh_money": plan.fresh_money,
            "resume_calls": plan.resume_calls,
            "fresh_calls": plan.fresh_calls,
        }
    return {
        "why": facts.why,
        "stopped_at": facts.stopped_at,
        "plan": figures,
        "plan_changed": facts.plan_changed,
        "blocked": facts.blocked,
        "resume_failed": facts.resume_failed,
    }


def run_out(run: Run) -> dict[str, Any]:
    """A run as the list and the detail show it (RunOut)."""
    return {
        "id": run.public_id,
        "pipeline": run.pipeline,
        "status": run.status,
        "current_stage": run.current_stage,
        "attempt": run.attempt,
        "version": run.version,
        "last_seq": run.last_seq,
        "deviated": run.deviated,
        "needs_human": run.attention == 0,
        "parent": ids.run_id(run.parent_id) if run.parent_id else None,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "stop": _stop(getattr(run, "stop", None)),
    }

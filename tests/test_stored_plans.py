"""The plan a page shows is computed where it can change, by a worker, never on a GET."""

from __future__ import annotations

from demo.models import SimCall
from runs.edits import edit_effect
from runs.models import Effect, Run, StoredPlan
from runs.planner import compute_plan
from tests.support.processes import wait_for


def stored_for(run: Run) -> StoredPlan | None:
    run.refresh_from_db()
    return StoredPlan.objects.filter(run=run, run_version=run.version).first()


def test_a_stopped_run_gets_its_plan_computed_by_a_worker(story_run):
    stored = wait_for(lambda: stored_for(story_run), what="the plan job")
    assert stored.fingerprint == compute_plan(story_run).fingerprint
    assert stored.data["next_stage"] == "visual"
    assert not stored.blocked


def test_a_ledger_edit_has_the_plan_computed_again(workers):
    from tests.support.plans import failed_run

    run = failed_run(workers, {"timeout": "publish/promote-charge/after"})
    assert wait_for(lambda: stored_for(run), what="the plan job").blocked
    charge = Effect.objects.get(run=run, call_id="promote-charge")

    edit_effect(
        charge.pk, {"status": Effect.Status.FAILED}, reason="no charge", actor="user:supervisor"
    )

    stored = wait_for(lambda: stored_for(run), what="the plan job after the edit")
    assert not stored.blocked
    assert stored.fingerprint == compute_plan(run).fingerprint


def test_an_older_plan_never_replaces_a_newer_one(transactional_db, facts, redis_conn):
    from runs import stored_plans
    from tests.support.plans import run_in_process

    run = run_in_process({"timeout": "publish/promote-charge/after"})
    old = compute_plan(run)
    edit_effect(
        Effect.objects.get(run=run, call_id="promote-charge").pk,
        {"status": Effect.Status.FAILED},
        reason="no charge",
        actor="user:supervisor",
    )
    new = stored_plans.refresh(run)
    queries = SimCall.objects.count()

    assert stored_plans.store(old) is None

    assert StoredPlan.objects.get(run=run).fingerprint == new.fingerprint
    assert SimCall.objects.count() == queries

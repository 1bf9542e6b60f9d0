"""The plan a page shows is computed where it can change, by a worker, never on a GET."""

from __future__ import annotations

from runs.ledger.edits import edit_effect
from runs.models import Effect, Run, StoredPlan
from runs.planning.planner import compute_plan
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


def test_an_older_plan_never_replaces_a_newer_one(
    transactional_db, facts, redis_conn, demo_service
):
    from runs.planning import stored_plans
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
    asked = demo_service.meter()

    assert stored_plans.store(old) is None

    assert StoredPlan.objects.get(run=run).fingerprint == new.fingerprint
    assert demo_service.meter() == asked


def test_a_stored_plan_keeps_its_calls_and_what_it_does_about_unsettled_calls(
    transactional_db, facts, redis_conn
):
    from runs.planning import stored_plans
    from tests.support.plans import run_in_process

    # The article went live but its answer never came back: the publish effect is unknown.
    run = run_in_process({"timeout": "publish/publish/after"})
    plan = stored_plans.refresh(run)

    stored = StoredPlan.objects.get(run=run)
    assert (stored.resume_calls, stored.fresh_calls) == (
        plan.cost_resume.tool_calls,
        plan.cost_fresh.tool_calls,
    )
    assert stored.fresh_calls > stored.resume_calls > 0
    assert stored.unsettled == {"publish/publish": "record-found"}


def test_the_migration_fills_calls_and_unsettled_of_plans_stored_before_it(
    transactional_db, facts, redis_conn
):
    import importlib

    from django.apps import apps

    from runs.planning import stored_plans
    from tests.support.plans import run_in_process

    run = run_in_process({"timeout": "publish/publish/after"})
    stored_plans.refresh(run)
    kept = StoredPlan.objects.values("resume_calls", "fresh_calls", "unsettled").get(run=run)
    StoredPlan.objects.filter(run=run).update(resume_calls=0, fresh_calls=0, unsettled={})

    migration = importlib.import_module("runs.migrations.0006_stored_plan_calls_and_unsettled")
    migration.fill_from_data(apps, None)

    assert (
        StoredPlan.objects.values("resume_calls", "fresh_calls", "unsettled").get(run=run) == kept
    )


def test_a_first_plan_stored_by_two_processes_at_once_leaves_one_row_and_no_error(
    transactional_db, facts, redis_conn
):
    """The second insert of a run's first plan waits on the unique key for the first one's
    commit (PostgreSQL; SQLite serialises the two), then goes the way of an update."""
    import threading

    from django.db import connection, transaction

    from runs.planning import stored_plans
    from tests.support.plans import charge_unknown

    run = charge_unknown()
    StoredPlan.objects.filter(run=run).delete()  # as before a worker's plan job stored one
    plan = compute_plan(run)
    failures: list[BaseException] = []

    def second() -> None:
        try:
            stored_plans.store(plan)
        except BaseException as exc:  # the failure to report, whatever it is
            failures.append(exc)
        finally:
            connection.close()

    with transaction.atomic():
        assert stored_plans.store(plan) is not None  # inserted, not committed yet
        other = threading.Thread(target=second)
        other.start()
        other.join(timeout=0.5 if connection.vendor == "postgresql" else 0)
    other.join(timeout=30)

    assert failures == []
    assert StoredPlan.objects.filter(run=run).count() == 1

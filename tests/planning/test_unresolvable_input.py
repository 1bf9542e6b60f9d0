"""An input whose resolver raises (the search source lost the topic's facts) no longer breaks
the plan, its approval or "Check targets again": the plan says which input cannot be resolved
and offers what is still possible, a strict resume on what the run pinned."""

from __future__ import annotations

import pytest

from demo.models import FactSheet
from runs.models import ApprovalMode, Run
from runs.planning import stored_plans
from runs.planning.planner import compute_plan
from runs.planning.resume import ResumeRefused, approve
from tests.support.plans import TOPIC, run_in_process

pytestmark = pytest.mark.django_db(transaction=True)


def facts_vanish() -> None:
    FactSheet.objects.filter(topic=TOPIC).delete()


def test_the_plan_names_the_input_that_cannot_be_resolved_and_keeps_strict(facts, redis_conn):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    facts_vanish()

    plan = compute_plan(run)

    assert not plan.upgrade.available
    assert "input facts cannot be resolved now" in plan.upgrade.reason
    assert plan.can_strict


def test_check_targets_again_and_a_strict_approval_still_work(facts, redis_conn):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    facts_vanish()

    stored = stored_plans.refresh(run)
    approval = approve(run, ApprovalMode.STRICT, stored.fingerprint, actor="user:op")

    assert approval.run.status == Run.Status.RESUMING


def test_an_upgrade_without_a_resolvable_input_is_refused_with_the_reason(facts, redis_conn):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    facts_vanish()
    plan = compute_plan(run)

    with pytest.raises(ResumeRefused, match="cannot be resolved now"):
        approve(run, ApprovalMode.UPGRADE, plan.fingerprint, actor="user:op")

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED

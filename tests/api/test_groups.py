"""Groups through the API: listed as the inbox groups them, one group with its runs, and a
group's approval, each run approved on its own plan."""

from __future__ import annotations

import pytest

from runs.models import Event, Run, StoredPlan
from tests.api.conftest import is_problem
from tests.support.plans import interrupted_with_plan

pytestmark = pytest.mark.django_db


def shape(run: Run) -> str:
    return StoredPlan.objects.values_list("shape", flat=True).get(run=run)


def test_groups_list_the_runs_that_need_a_human_by_plan_shape(viewer, facts):
    runs = [interrupted_with_plan(), interrupted_with_plan()]

    body = viewer.get("/groups").json()

    assert [(g["fingerprint"], g["count"]) for g in body["groups"]] == [(shape(runs[0]), 2)]
    assert body["groups"][0]["approvable"] is True


def test_a_group_lists_its_runs(viewer, facts):
    runs = [interrupted_with_plan(), interrupted_with_plan()]

    body = viewer.get(f"/groups/{shape(runs[0])}").json()

    assert [m["run"] for m in body["runs"]] == [r.public_id for r in runs]


def test_approving_a_group_approves_each_run_on_its_plan(operator, facts):
    runs = [interrupted_with_plan(), interrupted_with_plan()]

    response = operator.post(
        f"/groups/{shape(runs[0])}/approve", {"mode": "strict", "runs": [r.public_id for r in runs]}
    )

    assert response.status_code == 200
    assert [a["run"] for a in response.json()["approved"]] == [r.public_id for r in runs]
    assert set(Run.objects.values_list("status", flat=True)) == {Run.Status.RESUMING}
    approvals = Event.objects.filter(type=Event.Type.PLAN_APPROVED)
    assert len({e.payload["batch"] for e in approvals}) == 1
    assert {e.actor for e in approvals} == {"user:operator"}


def test_a_run_whose_plan_moved_is_skipped_with_its_fresh_plan(operator, facts):
    kept, moved = interrupted_with_plan(), interrupted_with_plan()
    group = shape(kept)
    StoredPlan.objects.filter(run=moved).update(fingerprint="0" * 64)

    body = operator.post(
        f"/groups/{group}/approve", {"mode": "strict", "runs": [kept.public_id, moved.public_id]}
    ).json()

    assert [a["run"] for a in body["approved"]] == [kept.public_id]
    assert [s["run"] for s in body["skipped"]] == [moved.public_id]
    assert body["skipped"][0]["plan"]["fingerprint"] != "0" * 64
    assert Run.objects.get(pk=moved.pk).status == Run.Status.INTERRUPTED


def test_a_group_nobody_has_is_a_409_problem(operator, facts):
    run = interrupted_with_plan()

    is_problem(
        operator.post(f"/groups/{'a' * 64}/approve", {"mode": "strict", "runs": [run.public_id]}),
        409,
    )

    assert Run.objects.get(pk=run.pk).status == Run.Status.INTERRUPTED


def test_a_malformed_group_fingerprint_is_a_400_problem(operator, facts):
    run = interrupted_with_plan()

    is_problem(
        operator.post("/groups/NOTHEX/approve", {"mode": "strict", "runs": [run.public_id]}), 400
    )


def test_a_bad_run_id_in_a_group_approval_is_a_400_problem(operator, facts):
    run = interrupted_with_plan()

    is_problem(
        operator.post(f"/groups/{shape(run)}/approve", {"mode": "strict", "runs": ["run-x"]}), 400
    )
    assert Run.objects.get(pk=run.pk).status == Run.Status.INTERRUPTED

"""The stored plan, asking the targets again, and the approval by fingerprint through the
same resume.approve as the pages: a stale fingerprint is a 409 carrying the fresh plan; the
same approval again answers as the first did."""

from __future__ import annotations

import pytest

from runs.models import Event, Run, StoredPlan
from tests.api.conftest import is_problem
from tests.support.plans import interrupted_with_plan, ledger_state

pytestmark = pytest.mark.django_db

STALE = "0" * 64


def stored_fingerprint(run: Run) -> str:
    return StoredPlan.objects.values_list("fingerprint", flat=True).get(run=run)


def approvals(run: Run) -> list[Event]:
    return list(Event.objects.filter(run=run, type=Event.Type.PLAN_APPROVED))


def test_the_stored_plan_reads_as_stored(viewer, facts):
    run = interrupted_with_plan()

    body = viewer.get(f"/runs/{run.public_id}/plan").json()

    assert body["fingerprint"] == stored_fingerprint(run)
    assert body["current"] is True
    assert body["plan"]["next_stage"] == "research"


def test_a_run_without_a_stored_plan_is_a_404_problem(viewer, facts):
    run = interrupted_with_plan()
    StoredPlan.objects.filter(run=run).delete()

    is_problem(viewer.get(f"/runs/{run.public_id}/plan"), 404)


def test_checking_targets_again_stores_a_fresh_plan(operator, facts):
    run = interrupted_with_plan()
    StoredPlan.objects.filter(run=run).update(fingerprint="old")

    body = operator.post(f"/runs/{run.public_id}/plan/check").json()

    assert body["fingerprint"] == stored_fingerprint(run) != "old"


def test_approving_by_fingerprint_resumes_the_run_as_the_user(operator, facts):
    run = interrupted_with_plan()

    response = operator.post(
        f"/runs/{run.public_id}/approve", {"mode": "strict", "fingerprint": stored_fingerprint(run)}
    )

    assert response.status_code == 200
    assert response.json()["resumed"] == run.public_id
    run.refresh_from_db()
    assert run.status == Run.Status.RESUMING
    assert [e.actor for e in approvals(run)] == [f"user:{operator.user.username}"]


def test_an_approval_with_a_field_it_does_not_have_is_a_422_and_resumes_nothing(operator, facts):
    run = interrupted_with_plan()
    body = {"mode": "strict", "fingerprint": stored_fingerprint(run), "extra": 1}

    is_problem(operator.post(f"/runs/{run.public_id}/approve", body), 422)

    run.refresh_from_db()
    assert run.status == Run.Status.INTERRUPTED
    assert approvals(run) == []


def test_a_stale_fingerprint_is_a_409_with_the_fresh_plan_and_changes_nothing(operator, facts):
    run = interrupted_with_plan()
    before = ledger_state(run)

    body = is_problem(
        operator.post(f"/runs/{run.public_id}/approve", {"mode": "strict", "fingerprint": STALE}),
        409,
    )

    assert body["fingerprint"] == stored_fingerprint(run)
    assert body["plan"]["fingerprint"] == body["fingerprint"]
    assert body["plan"]["next_stage"] == "research"
    assert ledger_state(run) == before


def test_the_same_approval_again_answers_as_the_first(operator, facts):
    run = interrupted_with_plan()
    body = {"mode": "strict", "fingerprint": stored_fingerprint(run)}
    first = operator.post(f"/runs/{run.public_id}/approve", body)

    again = operator.post(f"/runs/{run.public_id}/approve", body)

    assert again.status_code == first.status_code == 200
    assert again.json() == first.json()
    assert len(approvals(run)) == 1


def test_a_malformed_fingerprint_is_a_422_problem(operator, facts):
    run = interrupted_with_plan()

    is_problem(
        operator.post(f"/runs/{run.public_id}/approve", {"mode": "strict", "fingerprint": "zz"}),
        422,
    )
    assert approvals(run) == []

"""Idempotency-Key: the same key and body answer with the stored response without acting
again; the same key with another body is a 409; keys are each user's own."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F
from django.test import RequestFactory
from django.utils import timezone

from runs import engine
from runs.api import idempotency
from runs.api import runs as api_runs
from runs.models import Event, IdempotentRequest, Run, StoredPlan
from tests.api.conftest import caller, is_problem
from tests.support.plans import interrupted_with_plan

pytestmark = pytest.mark.django_db


def test_the_same_key_and_body_start_one_run_and_answer_the_same(operator, facts):
    body = {"pipeline": "content", "inputs": {}}
    first = operator.post("/runs", body, key="ci-build-41")

    again = operator.post("/runs", body, key="ci-build-41")

    assert Run.objects.count() == 1
    assert again.status_code == first.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"


def test_the_same_key_with_another_body_is_a_409_and_acts_not(operator, facts):
    operator.post("/runs", {"pipeline": "content", "inputs": {}}, key="ci-build-41")

    body = is_problem(
        operator.post(
            "/runs", {"pipeline": "content", "inputs": {"topic": "x"}}, key="ci-build-41"
        ),
        409,
    )

    assert "another request" in body["detail"]
    assert Run.objects.count() == 1


def test_the_same_key_on_another_endpoint_is_a_409(operator, facts):
    run = interrupted_with_plan()
    operator.post("/runs", {"pipeline": "content"}, key="k1")
    fingerprint = StoredPlan.objects.get(run=run).fingerprint

    is_problem(
        operator.post(
            f"/runs/{run.public_id}/approve",
            {"mode": "strict", "fingerprint": fingerprint},
            key="k1",
        ),
        409,
    )
    assert not Event.objects.filter(run=run, type=Event.Type.PLAN_APPROVED).exists()


def test_a_refusal_is_stored_and_answered_again_as_it_was(operator, facts):
    run = interrupted_with_plan()
    body = {"mode": "strict", "fingerprint": "0" * 64}
    first = operator.post(f"/runs/{run.public_id}/approve", body, key="approve-1")
    # The right fingerprint now would resume; the key still answers what it answered.
    again = operator.post(f"/runs/{run.public_id}/approve", body, key="approve-1")

    assert first.status_code == again.status_code == 409
    assert again.json() == first.json()
    assert IdempotentRequest.objects.get(key="approve-1").status == 409


def test_the_same_key_from_another_user_is_their_own(operator, facts):
    other = caller("operator", name="another-operator")
    operator.post("/runs", {"pipeline": "content"}, key="shared-key")

    response = other.post("/runs", {"pipeline": "content"}, key="shared-key")

    assert response.status_code == 201
    assert Run.objects.count() == 2


def test_a_key_whose_first_request_is_still_running_is_a_409(operator, facts):
    IdempotentRequest.objects.create(user=operator.user, key="busy", request_hash="x" * 64)

    is_problem(operator.post("/runs", {"pipeline": "content"}, key="busy"), 409)

    assert Run.objects.count() == 0


def test_a_key_that_is_not_printable_ascii_is_a_400(operator, facts):
    is_problem(operator.post("/runs", {"pipeline": "content"}, key="k" * 201), 400)

    assert Run.objects.count() == 0


def _claim_left_by_a_dead_process(user, key: str, body: dict, *, age: float) -> IdempotentRequest:
    """What a web process killed mid-request leaves: its claim, unanswered, claimed `age`
    seconds ago, and (its transaction gone with it) nothing of its action."""
    digest = idempotency.request_hash(RequestFactory().post("/api/v1/runs"), body)
    claim = IdempotentRequest.objects.create(user=user, key=key, request_hash=digest)
    IdempotentRequest.objects.filter(pk=claim.pk).update(
        claimed_at=timezone.now() - timedelta(seconds=age)
    )
    return claim


def test_a_claim_abandoned_past_the_bound_is_taken_over_and_acts_once(operator, facts, settings):
    settings.RESUMER_IDEMPOTENCY_CLAIM_SECONDS = 60
    body = {"pipeline": "content", "inputs": {}}
    _claim_left_by_a_dead_process(operator.user, "ci-build-7", body, age=61)

    first = operator.post("/runs", body, key="ci-build-7")
    again = operator.post("/runs", body, key="ci-build-7")

    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert Run.objects.count() == 1
    row = IdempotentRequest.objects.get(key="ci-build-7")
    assert (row.status, row.attempt) == (201, 2)


def test_a_claim_within_the_bound_is_not_taken_over(operator, facts, settings):
    settings.RESUMER_IDEMPOTENCY_CLAIM_SECONDS = 60
    body = {"pipeline": "content", "inputs": {}}
    _claim_left_by_a_dead_process(operator.user, "ci-build-7", body, age=50)

    problem = is_problem(operator.post("/runs", body, key="ci-build-7"), 409)

    assert problem["type"].endswith("idempotency-key-in-use")
    assert Run.objects.count() == 0
    assert IdempotentRequest.objects.get(key="ci-build-7").attempt == 1


def test_an_abandoned_claim_is_not_taken_over_by_another_body(operator, facts, settings):
    settings.RESUMER_IDEMPOTENCY_CLAIM_SECONDS = 60
    _claim_left_by_a_dead_process(
        operator.user, "ci-build-7", {"pipeline": "content", "inputs": {}}, age=61
    )

    is_problem(
        operator.post("/runs", {"pipeline": "content", "inputs": {"topic": "x"}}, key="ci-build-7"),
        409,
    )

    assert Run.objects.count() == 0
    assert IdempotentRequest.objects.get(key="ci-build-7").attempt == 1


def test_a_request_whose_claim_was_taken_over_meanwhile_rolls_its_action_back(
    operator, facts, monkeypatch
):
    def start_then_lose_the_claim(*args, **kwargs):
        started = engine.start_run(*args, **kwargs)
        # Meanwhile another request with the key took the claim over (it was too slow).
        IdempotentRequest.objects.filter(key="ci-build-7").update(attempt=F("attempt") + 1)
        return started

    monkeypatch.setattr(api_runs, "start_run", start_then_lose_the_claim)

    problem = is_problem(operator.post("/runs", {"pipeline": "content"}, key="ci-build-7"), 409)

    assert "took it over" in problem["detail"]
    assert Run.objects.count() == 0
    assert IdempotentRequest.objects.get(key="ci-build-7").status is None


def test_keys_past_their_retention_are_purged(operator, settings):
    settings.RESUMER_IDEMPOTENCY_RETENTION_HOURS = 24
    old, recent = (
        IdempotentRequest.objects.create(user=operator.user, key=key, request_hash="x" * 64)
        for key in ("old", "recent")
    )
    IdempotentRequest.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(hours=25)
    )

    assert IdempotentRequest.purge() == 1

    assert list(IdempotentRequest.objects.values_list("key", flat=True)) == ["recent"]

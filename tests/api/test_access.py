"""Who may call what: a token acts with its user's role (a viewer reads, an operator or a
supervisor writes), a revoked token is refused everywhere, a browser's session needs its
CSRF token to write, and a write records the token's user as the actor."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from runs.api import tokens
from runs.models import ApiToken, Event, IdempotentRequest, Run, StoredPlan
from tests.api.conftest import BASE, Caller, is_problem
from tests.support.plans import interrupted_with_plan
from tests.support.web import client_as

pytestmark = pytest.mark.django_db

READS = [
    "/me",
    "/runs",
    "/runs/{run}",
    "/runs/{run}/events",
    "/runs/{run}/effects",
    "/runs/{run}/plan",
    "/groups",
    "/groups/{group}",
    "/batches/{batch}",
    "/gates",
    "/gates/1",
]
WRITES = [
    ("/runs", {"pipeline": "content", "inputs": {}}),
    ("/runs/{run}/plan/check", {}),
    ("/runs/{run}/approve", {"mode": "strict", "fingerprint": "{fingerprint}"}),
    ("/groups/{group}/approve", {"mode": "strict", "runs": ["{run}"]}),
    ("/gates/1/answer", {"answer": {"decision": "approve"}, "digest": "0" * 64}),
]


@pytest.fixture
def world(facts) -> dict[str, str]:
    run = interrupted_with_plan()
    plan = StoredPlan.objects.get(run=run)
    return {
        "run": run.public_id,
        "fingerprint": plan.fingerprint,
        "group": plan.shape,
        "batch": "f" * 32,
    }


def fill(template: str, world: dict[str, str]) -> str:
    return template.format(**world)


def ledger() -> tuple[int, int, int]:
    return Run.objects.count(), Event.objects.count(), IdempotentRequest.objects.count()


@pytest.mark.parametrize("path", READS)
def test_a_viewer_token_reads_everything(viewer, world, path):
    response = viewer.get(fill(path, world))

    assert response.status_code not in (401, 403), response.content[:300]


@pytest.mark.parametrize(("path", "body"), WRITES)
def test_a_viewer_token_is_refused_every_write(viewer, world, path, body):
    before = ledger()

    is_problem(viewer.post(fill(path, world), body_with(body, world), key="k"), 403)

    assert ledger() == before


def body_with(body: dict, world: dict[str, str]) -> dict:
    text = json.dumps(body)
    for name, value in world.items():
        text = text.replace("{" + name + "}", value)
    return json.loads(text)


@pytest.mark.parametrize("path", READS)
def test_a_revoked_token_is_refused_every_read(operator, world, path):
    tokens.revoke(operator.user, ApiToken.objects.get(user=operator.user).pk)

    is_problem(operator.get(fill(path, world)), 401)


@pytest.mark.parametrize(("path", "body"), WRITES)
def test_a_revoked_token_is_refused_every_write(operator, world, path, body):
    tokens.revoke(operator.user, ApiToken.objects.get(user=operator.user).pk)
    before = ledger()

    is_problem(operator.post(fill(path, world), body_with(body, world)), 401)

    assert ledger() == before


def test_a_revoked_token_does_not_fall_back_to_the_session(operator, world):
    tokens.revoke(operator.user, ApiToken.objects.get(user=operator.user).pk)
    browser = client_as("operator")

    response = browser.get(BASE + "/runs", headers={"Authorization": f"Bearer {operator.secret}"})

    is_problem(response, 401)


def test_an_unknown_token_is_refused(db):
    is_problem(Caller(User(username="x"), "rsm_" + "a" * 43).get("/runs"), 401)


def test_no_credentials_is_a_401(db):
    is_problem(Client().get(BASE + "/runs"), 401)


def test_a_token_of_a_user_without_a_role_reads_nothing(db):
    user = User.objects.create_user("nobody")
    _, secret = tokens.issue(user, "no role")

    is_problem(Caller(user, secret).get("/runs"), 403)


def test_a_token_write_records_its_user_as_the_actor(supervisor, world):
    body = {"mode": "strict", "fingerprint": world["fingerprint"]}

    supervisor.post(f"/runs/{world['run']}/approve", body)

    approved = Event.objects.get(type=Event.Type.PLAN_APPROVED)
    assert approved.actor == approved.payload["by"] == "user:supervisor"


def test_a_token_marks_when_it_was_last_used(viewer):
    viewer.get("/me")

    assert ApiToken.objects.get(user=viewer.user).last_used_at is not None


def test_a_session_post_without_the_csrf_token_is_refused(world):
    browser = client_as("operator", enforce_csrf_checks=True)
    body = {"mode": "strict", "fingerprint": world["fingerprint"]}

    response = browser.post(
        f"{BASE}/runs/{world['run']}/approve", json.dumps(body), content_type="application/json"
    )

    is_problem(response, 403)
    assert not Event.objects.filter(type=Event.Type.PLAN_APPROVED).exists()


def test_a_session_post_with_the_csrf_token_acts(world):
    browser = client_as("operator", enforce_csrf_checks=True)
    browser.get("/account/tokens/")  # a page with a form sets the CSRF cookie
    csrf = browser.cookies["csrftoken"].value
    body = {"mode": "strict", "fingerprint": world["fingerprint"]}

    response = browser.post(
        f"{BASE}/runs/{world['run']}/approve",
        json.dumps(body),
        content_type="application/json",
        headers={"X-CSRFToken": csrf},
    )

    assert response.status_code == 200
    assert Event.objects.get(type=Event.Type.PLAN_APPROVED).actor == "user:operator"


def test_a_session_reads_without_a_csrf_token(world):
    browser = client_as("viewer", enforce_csrf_checks=True)

    assert browser.get(f"{BASE}/runs/{world['run']}").status_code == 200

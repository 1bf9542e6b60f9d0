"""The token page: a person makes a named token (shown once, stored as its hash) and revokes
their own, never somebody else's. Only its user makes a token: the admin revokes tokens and
makes none, and no API operation makes one."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from runs.access import roles
from runs.api import tokens
from runs.models import ApiToken
from tests.support.web import client_as

pytestmark = pytest.mark.django_db


def test_a_new_token_is_shown_once_and_stored_as_its_hash():
    browser = client_as("viewer")

    made = browser.post("/account/tokens/", {"name": "laptop script"})
    secret = re.search(r"rsm_[A-Za-z0-9_-]+", made.content.decode()).group(0)
    listed = browser.get("/account/tokens/").content.decode()

    token = ApiToken.objects.get()
    assert made.status_code == 201
    assert token.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert token.name == "laptop script" and token.user.username == "viewer"
    assert secret not in listed and token.prefix in listed


def test_a_token_made_on_the_page_calls_the_api(db):
    browser = client_as("operator")
    made = browser.post("/account/tokens/", {"name": "ci"}).content.decode()
    secret = re.search(r"rsm_[A-Za-z0-9_-]+", made).group(0)

    response = browser.__class__().get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"})

    assert response.json()["username"] == "operator"
    assert response.json()["via"] == "token"


def test_a_person_revokes_their_own_token():
    browser = client_as("operator")
    browser.post("/account/tokens/", {"name": "old"})
    token = ApiToken.objects.get()

    browser.post(f"/account/tokens/{token.pk}/revoke/")

    token.refresh_from_db()
    assert token.revoked_at is not None
    assert tokens.authenticate("rsm_anything") is None


def test_revoking_a_token_a_second_time_says_it_was_already_revoked():
    browser = client_as("operator")
    browser.post("/account/tokens/", {"name": "old"})
    token = ApiToken.objects.get()
    browser.post(f"/account/tokens/{token.pk}/revoke/")
    first = ApiToken.objects.get().revoked_at

    again = browser.post(f"/account/tokens/{token.pk}/revoke/", follow=True)

    assert again.status_code == 200
    assert "already revoked" in again.content.decode()
    assert ApiToken.objects.get().revoked_at == first  # when it was revoked is kept


def test_nobody_revokes_someone_elses_token():
    owner, _ = roles.ensure_user("owner", "owner-pass", roles.SUPERVISOR)
    token, _ = tokens.issue(owner, "theirs")

    response = client_as("operator").post(f"/account/tokens/{token.pk}/revoke/")

    assert response.status_code == 404
    assert "You have no such token." in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is None


def test_a_token_needs_a_name():
    response = client_as("viewer").post("/account/tokens/", {"name": ""})

    assert response.status_code == 400
    assert not ApiToken.objects.exists()


def test_the_page_makes_a_token_for_the_signed_in_user_whatever_else_is_posted():
    other, _ = roles.ensure_user("operator2", "operator2-pass", roles.OPERATOR)

    client_as("supervisor").post("/account/tokens/", {"name": "bot", "user": other.pk})

    assert ApiToken.objects.get().user.username == "supervisor"


@pytest.mark.parametrize("maker", ["supervisor", "superuser"])
def test_nobody_makes_a_token_for_a_user_in_the_admin(maker):
    if maker == "superuser":
        admin = Client()
        admin.force_login(User.objects.create_superuser("root", "root@example.com", "root-pass"))
    else:
        admin = client_as(maker)
    operator, _ = roles.ensure_user("operator2", "operator2-pass", roles.OPERATOR)

    shown = admin.get("/admin/runs/apitoken/add/")
    made = admin.post("/admin/runs/apitoken/add/", {"user": operator.pk, "name": "bot"})

    assert (shown.status_code, made.status_code) == (403, 403)
    assert not ApiToken.objects.exists()


def test_the_admins_token_list_offers_no_add():
    html = client_as("supervisor").get("/admin/runs/apitoken/").content.decode()

    assert "/admin/runs/apitoken/add/" not in html


def test_no_api_operation_makes_a_token():
    operator, _ = roles.ensure_user("operator", "operator-pass", roles.OPERATOR)
    _, secret = tokens.issue(operator, "mine")
    bearer = {"Authorization": f"Bearer {secret}"}

    for path in ("/api/v1/tokens", "/api/v1/me/tokens", "/api/v1/account/tokens"):
        response = Client().post(
            path, {"name": "theirs"}, content_type="application/json", headers=bearer
        )
        assert response.status_code in (404, 405), path

    assert ApiToken.objects.count() == 1


def test_a_supervisor_revokes_tokens_in_the_admin():
    operator, _ = roles.ensure_user("operator", "operator-pass", roles.OPERATOR)
    token, secret = tokens.issue(operator, "bot")

    client_as("supervisor").post(
        "/admin/runs/apitoken/", {"action": "revoke", "_selected_action": [token.pk]}
    )

    assert tokens.authenticate(secret) is None


def test_an_operator_does_not_see_tokens_in_the_admin():
    operator, _ = roles.ensure_user("operator", "operator-pass", roles.OPERATOR)
    operator.is_staff = True  # staff, to enter the admin, but no supervisor
    operator.save()
    browser = Client()
    browser.force_login(operator)

    assert browser.get("/admin/runs/apitoken/").status_code == 403

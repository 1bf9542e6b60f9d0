"""The API's tests: users of each role with a token each, and clients that call /api/v1/ by
token or by session. Runs come from tests/support (plans.py); nothing here starts a worker:
what an approval or an answer queues after commit never runs inside a test's transaction."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from runs.access import roles
from runs.api import tokens

BASE = "/api/v1"


@pytest.fixture(autouse=True)
def quick_settings(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Stages run inside the test's transaction: a heartbeat on its own connection must not
    # fire meanwhile (on SQLite it would wait on the test's write lock).
    settings.RESUMER_LEASE_TTL = 120


@dataclass
class Caller:
    """Calls the API as one user, with their token."""

    user: User
    secret: str

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}", **extra}

    def get(self, path: str, **params: Any):
        return Client().get(BASE + path, params, headers=self.headers())

    def post(
        self, path: str, body: Any = None, *, key: str | None = None, raw: bytes | None = None
    ):
        extra = {"Idempotency-Key": key} if key is not None else {}
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return Client().post(
            BASE + path, data, content_type="application/json", headers=self.headers(**extra)
        )


def caller(role: str, name: str | None = None) -> Caller:
    user, _ = roles.ensure_user(name or role, f"{role}-test-pass", role)
    _, secret = tokens.issue(user, f"{role} test token")
    return Caller(user, secret)


@pytest.fixture
def viewer(db) -> Caller:
    return caller(roles.VIEWER)


@pytest.fixture
def operator(db) -> Caller:
    return caller(roles.OPERATOR)


@pytest.fixture
def supervisor(db) -> Caller:
    return caller(roles.SUPERVISOR)


def is_problem(response, status: int) -> dict[str, Any]:
    """The response is an RFC 9457 problem of `status`; its body."""
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert body["type"] and body["title"] and body["detail"]
    return body

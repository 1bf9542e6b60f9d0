"""Logged-in dashboard clients, one per role, for tests that go through Django's test client."""

from __future__ import annotations

from django.test import Client


def client_as(role: str, **kwargs) -> Client:
    """A client logged in as a user of `role` (viewer, operator, supervisor)."""
    from runs.dashboard import roles

    user, _ = roles.ensure_user(role, f"{role}-test-pass", role)
    client = Client(**kwargs)
    # force_login: axes wants the request passed to authenticate(), which login() does not.
    client.force_login(user)
    return client

"""`manage.py create_user`: a person who signs in with a role, made without seed_demo; an
existing user gets a new role only when asked; bad input is a CommandError that changes
nothing."""

from __future__ import annotations

import io
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from runs.access import roles


@pytest.fixture(autouse=True)
def quick_hashing(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def signs_in(username: str, password: str) -> bool:
    """The login page, as a person uses it (axes keeps it)."""
    client = Client()
    client.post("/login/", {"username": username, "password": password})
    return client.get("/runs/").status_code == 200


def create_user(*args: str, stdin: str | None = None, monkeypatch=None) -> str:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    out = StringIO()
    call_command("create_user", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("role", roles.ROLES)
def test_a_new_user_holds_exactly_the_role_and_signs_in_with_the_printed_password(db, role):
    out = create_user("dana", "--role", role)

    password = out.split("password (shown once): ")[1].strip()
    assert signs_in("dana", password)
    user = User.objects.get(username="dana")
    assert roles.roles(user) == {role}
    assert user.is_staff == (role == roles.SUPERVISOR)


def test_the_password_may_come_from_standard_input(db, monkeypatch):
    out = create_user(
        "dana",
        "--role",
        "operator",
        "--password-stdin",
        stdin="a-long-pass-9\n",
        monkeypatch=monkeypatch,
    )

    assert "password" not in out.replace("--password", "")
    assert signs_in("dana", "a-long-pass-9")


def test_update_gives_an_existing_user_the_role_and_takes_the_others(db):
    user, _ = roles.ensure_user("dana", "dana-pass-1234", roles.SUPERVISOR)

    create_user("dana", "--role", "viewer", "--update")

    user = User.objects.get(pk=user.pk)
    assert roles.roles(user) == {roles.VIEWER} and not user.is_staff
    assert user.check_password("dana-pass-1234")


BAD = [
    pytest.param(["dana", "--role", "operator"], "exists", id="an-existing-user"),
    pytest.param(["dana", "--role", "admin"], "invalid choice", id="an-unknown-role"),
    pytest.param(["nobody", "--role", "viewer", "--update"], "no user nobody", id="update"),
    pytest.param(["bad name!", "--role", "viewer"], "username", id="a-bad-username"),
]


@pytest.mark.parametrize(("args", "said"), BAD)
def test_bad_input_is_refused_and_changes_nothing(db, args, said):
    roles.ensure_user("dana", "dana-pass-1234", roles.VIEWER)

    with pytest.raises(CommandError, match=said):
        create_user(*args)

    assert list(User.objects.values_list("username", flat=True)) == ["dana"]
    dana = User.objects.get(username="dana")
    assert roles.roles(dana) == {roles.VIEWER} and dana.check_password("dana-pass-1234")


def test_a_weak_password_from_standard_input_makes_no_user(db, monkeypatch):
    with pytest.raises(CommandError, match="the password"):
        create_user(
            "dana", "--role", "viewer", "--password-stdin", stdin="dana\n", monkeypatch=monkeypatch
        )

    assert not User.objects.exists()

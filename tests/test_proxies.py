"""The login lockout behind a proxy (runs/proxies.py): keyed on the client's address the
trusted proxies saw, never on the proxy's own, and never on what a client wrote itself."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.test import Client, RequestFactory

from runs.access import roles
from runs.proxies import client_ip

PROXY = "127.0.0.1"


def request(forwarded: str | None) -> object:
    meta = {"REMOTE_ADDR": PROXY}
    if forwarded is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded
    return RequestFactory().get("/", **meta)


def test_without_a_trusted_proxy_the_header_is_never_read(settings):
    settings.RESUMER_TRUSTED_PROXIES = 0

    assert client_ip(request("203.0.113.5")) == PROXY


def test_behind_one_proxy_the_client_is_the_address_it_appended(settings):
    settings.RESUMER_TRUSTED_PROXIES = 1

    assert client_ip(request("203.0.113.5")) == "203.0.113.5"
    # What a client wrote into the header itself stands to the left and is not read.
    assert client_ip(request("6.6.6.6, 203.0.113.5")) == "203.0.113.5"


def test_behind_two_proxies_the_client_is_second_from_the_right(settings):
    settings.RESUMER_TRUSTED_PROXIES = 2

    assert client_ip(request("6.6.6.6, 203.0.113.5, 10.0.0.7")) == "203.0.113.5"
    assert client_ip(request("203.0.113.5")) == PROXY  # fewer hops than trusted: the socket


@pytest.mark.django_db
def test_five_bad_passwords_from_one_client_do_not_lock_out_another_behind_the_proxy(
    settings,
):
    settings.RESUMER_TRUSTED_PROXIES = 1
    roles.ensure_user("sam", "sam-right-pass", roles.SUPERVISOR)
    attacker = Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="198.51.100.9")
    for _ in range(django_settings.AXES_FAILURE_LIMIT):
        attacker.post("/login/", {"username": "sam", "password": "wrong"})
    assert attacker.post("/login/", {"username": "sam", "password": "wrong"}).status_code == 429

    sam = Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="203.0.113.5")
    response = sam.post("/login/", {"username": "sam", "password": "sam-right-pass"})

    assert response.status_code == 302

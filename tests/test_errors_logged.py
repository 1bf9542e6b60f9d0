"""Every 500 leaves its traceback in the log with the request's id, with DEBUG off as in
production; every API error is problem+json, at an unknown address and for a NUL too
(issue 47)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from django.test import Client

from runs.dashboard import views
from runs.request_ids import RequestIdFilter
from tests.support.web import client_as

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """What the console handler LOGGING gives Django's request errors writes, readable."""
    (handler,) = [
        h
        for h in logging.getLogger("django.request").handlers
        if any(isinstance(f, RequestIdFilter) for f in h.filters)
    ]
    written = io.StringIO()
    before = handler.setStream(written)
    yield written
    handler.setStream(before)


def test_a_page_that_fails_logs_its_traceback_with_the_request_id(console, monkeypatch, settings):
    settings.DEBUG = False

    def broken(*args, **kwargs):
        raise RuntimeError("the inbox query broke")

    monkeypatch.setattr(views, "inbox_page", broken)
    client = client_as("viewer", raise_request_exception=False)

    response = client.get("/runs/")

    assert response.status_code == 500
    logged = console.getvalue()
    request_id = response["X-Request-Id"]
    assert f"[request {request_id}] Internal Server Error: /runs/" in logged
    assert "Traceback" in logged and "RuntimeError: the inbox query broke" in logged


def test_a_request_id_a_proxy_gave_is_kept():
    response = Client().get("/login/", headers={"X-Request-Id": "edge-7f3a"})

    assert response["X-Request-Id"] == "edge-7f3a"


@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/v1/runs/run-1/nope", "/api/v2/runs"])
def test_an_unknown_api_address_is_a_404_problem(path):
    response = Client().get(path)

    assert response.status_code == 404
    assert response["Content-Type"] == PROBLEM
    assert response.json()["status"] == 404


@pytest.mark.parametrize("path", ["/api/v1/runs/run-1%00", "/api/v1/runs?after=%00"])
def test_a_nul_in_an_api_address_or_query_is_a_400_problem(path):
    response = Client().get(path)

    assert response.status_code == 400
    assert response["Content-Type"] == PROBLEM
    assert "NUL" in response.json()["detail"]

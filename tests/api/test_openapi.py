"""The served OpenAPI schema describes what the API really answers: a few real responses
are validated against it with jsonschema."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
from django.contrib.staticfiles import finders

from runs.models import StoredPlan
from tests.api.conftest import BASE
from tests.support.plans import interrupted_with_plan
from tests.support.web import client_as

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(db) -> dict[str, Any]:
    response = client_as("viewer").get(BASE + "/openapi.json")
    assert response.status_code == 200
    return response.json()


def check(schema: dict[str, Any], path: str, method: str, response) -> None:
    """`response` fits what the schema says `method path` answers with its status."""
    answers = schema["paths"][path][method]["responses"]
    declared = answers[str(response.status_code)]["content"]["application/json"]["schema"]
    # Resolve "#/components/schemas/..." against the whole document.
    validator = jsonschema.Draft202012Validator({**declared, "components": schema["components"]})
    validator.validate(response.json())


def test_the_schema_is_openapi_3_and_names_every_endpoint(schema):
    assert schema["openapi"].startswith("3.")
    assert {
        "/api/v1/runs",
        "/api/v1/runs/{run_id}/approve",
        "/api/v1/gates/{gate_id}/answer",
    } <= set(schema["paths"])


def test_the_run_list_and_a_run_fit_the_schema(schema, viewer, facts):
    run = interrupted_with_plan()

    check(schema, "/api/v1/runs", "get", viewer.get("/runs"))
    check(schema, "/api/v1/runs/{run_id}", "get", viewer.get(f"/runs/{run.public_id}"))
    check(
        schema, "/api/v1/runs/{run_id}/events", "get", viewer.get(f"/runs/{run.public_id}/events")
    )
    check(schema, "/api/v1/runs/{run_id}/plan", "get", viewer.get(f"/runs/{run.public_id}/plan"))


def test_an_approval_and_a_stale_one_fit_the_schema(schema, operator, facts):
    run, other = interrupted_with_plan(), interrupted_with_plan()
    fingerprint = StoredPlan.objects.get(run=run).fingerprint
    path = "/api/v1/runs/{run_id}/approve"

    ok = operator.post(
        f"/runs/{run.public_id}/approve", {"mode": "strict", "fingerprint": fingerprint}
    )
    stale = operator.post(
        f"/runs/{other.public_id}/approve", {"mode": "strict", "fingerprint": "0" * 64}
    )

    check(schema, path, "post", ok)
    check(schema, path, "post", stale)


def test_the_groups_fit_the_schema(schema, viewer, facts):
    interrupted_with_plan()

    check(schema, "/api/v1/groups", "get", viewer.get("/groups"))


def test_the_docs_page_is_served_with_local_assets(db):
    response = client_as("viewer").get(BASE + "/docs")

    assert response.status_code == 200
    page = response.content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in page
    assert "https://" not in page
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_the_docs_pages_scripts_and_styles_are_static_files_of_this_deployment(db):
    page = client_as("viewer").get(BASE + "/docs").content.decode()

    assets = re.findall(r'(?:src|href)="/static/(ninja/[^"]+)"', page)
    assert {"ninja/swagger-ui-bundle.js", "ninja/swagger-ui.css"} <= set(assets)
    # What collectstatic gathers and WhiteNoise serves (django-ninja is not an installed app).
    assert [asset for asset in assets if finders.find(asset) is None] == []

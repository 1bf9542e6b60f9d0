"""GET /api/v1/pipelines/<name>/stats: the pipeline page's figures for machines, with what
resuming saved apart from what gates replayed (issue 44)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.support.plans import charge_found_and_resumed
from tests.support.web import api_as

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/pipelines/content/stats"


def test_a_reused_charge_is_saved_by_resuming_at_its_price(facts):
    charge_found_and_resumed()
    response = api_as("viewer").get(URL, {"runs": 10})
    assert response.status_code == 200
    body = response.json()
    publish = next(s for s in body["stages"] if s["stage"] == "publish")
    assert Decimal(publish["saved_by_resuming"]["money"]) >= Decimal("5.00")
    assert publish["replayed_after_gates"] == 0
    assert body["runs"] == 1 and Decimal(body["saved_money"]) >= Decimal("5.00")
    # The stages the resume skipped had spent model tokens: saved, as their money is.
    research = next(s for s in body["stages"] if s["stage"] == "research")
    assert research["saved_by_skipping"]["tokens"] > 0
    assert body["saved_tokens"] == sum(
        s["saved_by_skipping"]["tokens"] + s["saved_by_resuming"]["tokens"] for s in body["stages"]
    )


@pytest.mark.parametrize(("query", "status"), [({"runs": 7}, 400), ({"runs": "abc"}, 400)])
def test_a_bad_window_is_refused(query, status):
    assert api_as("viewer").get(URL, query).status_code == status


def test_an_unknown_pipeline_is_a_404():
    response = api_as("viewer").get("/api/v1/pipelines/nope/stats")
    assert response.status_code == 404 and "nope" in response.json()["detail"]

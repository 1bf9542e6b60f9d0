"""A run of a pipeline this web process does not load says so on its page instead of
"0 of 0 stages", and the page still answers."""

from __future__ import annotations

import pytest

from runs import engine
from runs.pipeline import registry
from tests.support.web import client_as


@pytest.mark.django_db
def test_a_run_of_an_unregistered_pipeline_is_flagged_on_its_page(settings):
    run = engine.start_run("content", {}, actor="test", enqueue=False)
    settings.RESUMER_PIPELINES = []
    registry._pipelines = None
    try:
        response = client_as("viewer").get(f"/runs/{run.public_id}/")
    finally:
        registry._pipelines = None

    assert response.status_code == 200
    html = response.content.decode()
    assert "is not registered in this web process" in html
    assert "0 of 0 stages" not in html

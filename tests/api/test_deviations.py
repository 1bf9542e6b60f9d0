"""POST /api/v1/runs/{run}/acknowledge: a finished run's deviation acknowledged by an
operator's token, with a reason; a viewer's token is refused and nothing is written."""

from __future__ import annotations

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.models import Event, Run
from tests.support.plans import finished_deviated

pytestmark = pytest.mark.django_db(transaction=True)


def acknowledged(run: Run) -> int:
    return Event.objects.filter(run=run, type=Event.Type.ACKNOWLEDGED).count()


def test_an_operators_token_acknowledges_a_deviation_as_that_user(facts, operator):
    run = finished_deviated()

    response = operator.post(f"/runs/{run.public_id}/acknowledge", {"reason": "expected retry"})

    assert response.status_code == 200, response.content
    run.refresh_from_db()
    assert (run.deviated, run.attention) == (False, 2)
    event = Event.objects.get(run=run, type=Event.Type.ACKNOWLEDGED)
    assert event.actor == f"user:{operator.user.username}"
    assert response.json()["seq"] == event.seq


def test_a_viewers_token_may_not_acknowledge(facts, viewer):
    run = finished_deviated()

    response = viewer.post(f"/runs/{run.public_id}/acknowledge", {"reason": "fine"})

    assert response.status_code == 403
    assert response["Content-Type"].startswith("application/problem+json")
    assert acknowledged(run) == 0


def test_a_run_without_a_deviation_is_a_409_problem(facts, operator):
    run = run_inline(engine.start_run("content", {}, actor="test", enqueue=False).pk)

    response = operator.post(f"/runs/{run.public_id}/acknowledge", {"reason": "fine"})

    assert response.status_code == 409
    assert "no deviation" in response.json()["detail"]
    assert acknowledged(run) == 0


def test_an_empty_reason_is_a_422_problem(facts, operator):
    run = finished_deviated()

    response = operator.post(f"/runs/{run.public_id}/acknowledge", {"reason": ""})

    assert response.status_code == 422
    assert acknowledged(run) == 0

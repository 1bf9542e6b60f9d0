"""POST /api/v1/runs/{run}/close and /ask-again: a stopped run closed out with a reason, a
refused confirmation asked again, by an operator's token; refusals are problems (404 unknown
run, 409 a run that is not stopped or has nothing to ask again, 422 a missing reason, 403 a
viewer) and write nothing."""

from __future__ import annotations

import pytest

from runs import engine
from runs.models import Event, Gate, GateStatus, Run
from tests.api.conftest import BASE, is_problem
from tests.gates import pipelines as gp
from tests.support.pipelines import registered
from tests.support.refusals import confirm, refused_charge, sent_back_review, waiting_charge

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def gate_pipelines(settings, demo_service, redis_conn):
    with registered(settings, *gp.PATHS):
        yield


def closed(run: Run) -> int:
    return Event.objects.filter(run=run, type=Event.Type.CLOSED_OUT).count()


def test_an_operators_token_closes_a_stopped_run_out(operator):
    run = refused_charge()

    response = operator.post(f"/runs/{run.public_id}/close", {"reason": "card over its limit"})

    assert response.status_code == 200, response.content
    body = response.json()
    run.refresh_from_db()
    assert (run.status, run.attention) == (Run.Status.CLOSED, 2)
    event = Event.objects.get(run=run, type=Event.Type.CLOSED_OUT)
    assert event.actor == f"user:{operator.user.username}"
    assert (body["status"], body["seq"], body["reason"]) == (
        "closed",
        event.seq,
        event.payload["reason"],
    )


def test_closing_a_waiting_run_says_which_gates_it_closed(operator):
    gate = waiting_charge()

    response = operator.post(f"/runs/run-{gate.run_id}/close", {"reason": "not wanted"})

    assert response.status_code == 200, response.content
    assert response.json()["gates_closed"] == ["pay/fee"]
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.CLOSED


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}])
def test_a_missing_reason_is_a_422_problem(operator, body):
    run = refused_charge()

    response = operator.post(f"/runs/{run.public_id}/close", body)

    is_problem(response, 422)
    assert closed(run) == 0 and Run.objects.get(pk=run.pk).status == Run.Status.FAILED


def test_a_run_that_is_running_or_closed_or_succeeded_is_a_409_problem(operator):
    pending = engine.start_run("gate-charge", {}, actor="test", enqueue=False)
    succeeded = confirm(waiting_charge())
    done = refused_charge()
    operator.post(f"/runs/{done.public_id}/close", {"reason": "first"})

    for run in (pending, succeeded, done):
        response = operator.post(f"/runs/{run.public_id}/close", {"reason": "again"})
        assert is_problem(response, 409)["type"].endswith("/not-closed")

    assert (closed(pending), closed(succeeded), closed(done)) == (0, 0, 1)


def test_an_unknown_run_is_a_404_problem(operator):
    is_problem(operator.post("/runs/run-987654/close", {"reason": "gone"}), 404)


def test_a_viewers_token_may_not_close_a_run(viewer):
    run = refused_charge()

    is_problem(viewer.post(f"/runs/{run.public_id}/close", {"reason": "no"}), 403)

    assert closed(run) == 0


def test_the_same_close_sent_again_with_its_key_answers_as_the_first(operator):
    run = refused_charge()
    path = f"/runs/{run.public_id}/close"

    first = operator.post(path, {"reason": "done"}, key="close-1")
    again = operator.post(path, {"reason": "done"}, key="close-1")

    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert closed(run) == 1


def test_an_operators_token_asks_a_refused_confirmation_again(operator):
    run = refused_charge()

    response = operator.post(f"/runs/{run.public_id}/ask-again", {})

    assert response.status_code == 200, response.content
    body = response.json()
    gate = Gate.objects.get(run=run, gate_id="fee")
    assert (body["id"], body["status"], body["answer"]) == (gate.pk, GateStatus.OPEN, None)
    assert body["attempts"][0]["by"] == "sam" and "card declined" in body["attempts"][0]["error"]
    assert Run.objects.get(pk=run.pk).status == Run.Status.WAITING


def test_an_operators_token_asks_a_sent_back_review_again(operator, facts):
    run = sent_back_review(notes="too short")

    response = operator.post(f"/runs/{run.public_id}/ask-again", {})

    assert response.status_code == 200, response.content
    (attempt,) = response.json()["attempts"]
    assert attempt["sent_back"] is True and attempt["answer"]["notes"] == "too short"
    assert Gate.objects.get(run=run, gate_id="review").status == GateStatus.OPEN


def test_asking_again_another_gate_than_the_runs_is_a_409_naming_the_one_it_can(operator):
    run = refused_charge()
    gate = Gate.objects.get(run=run, gate_id="fee")

    response = operator.post(f"/runs/{run.public_id}/ask-again", {"gate": gate.pk + 1000})

    body = is_problem(response, 409)
    assert f"gate {gate.pk + 1000} is not one {run.public_id} can ask again" in body["detail"]
    assert f"it can ask gate {gate.pk} (pay/fee)" in body["detail"]
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.ANSWERED


def test_asking_again_where_nothing_was_refused_is_a_409_problem(operator):
    gate = waiting_charge()

    response = operator.post(f"/runs/run-{gate.run_id}/ask-again", {"gate": gate.pk})

    is_problem(response, 409)
    assert not Event.objects.filter(run_id=gate.run_id, type=Event.Type.GATE_REOPENED).exists()


def test_the_openapi_schema_names_both_ways_out(operator):
    paths = set(operator.get("/openapi.json").json()["paths"])

    assert {f"{BASE}/runs/{{run_id}}/close", f"{BASE}/runs/{{run_id}}/ask-again"} <= paths

"""Bad input is a 4xx problem+json with a message, never a 500: ids out of range, digits of
other scripts, empty and huge bodies, bodies that are not JSON."""

from __future__ import annotations

import pytest

from runs.models import Event, Run
from tests.api.conftest import is_problem
from tests.support.plans import interrupted_with_plan

pytestmark = pytest.mark.django_db

BAD_IDS = [
    "run-99999999999999999999999",
    "99999999999999999999",
    "run-١٢",
    "١٢",
    "run--1",
    "run-1.5",
    "%20",
]


@pytest.mark.parametrize("run_id", BAD_IDS)
def test_a_run_id_that_names_nothing_is_a_404_problem(viewer, run_id):
    is_problem(viewer.get(f"/runs/{run_id}"), 404)


@pytest.mark.parametrize("gate_id", ["99999999999999999999", "١", "0x1"])
def test_a_gate_id_that_names_nothing_is_a_404_problem(viewer, gate_id):
    is_problem(viewer.get(f"/gates/{gate_id}"), 404)


@pytest.mark.parametrize("after", ["99999999999999999999", "١٢", "-1", "run-x"])
def test_a_bad_cursor_is_a_400_problem(viewer, after):
    is_problem(viewer.get("/runs", after=after), 400)


@pytest.mark.parametrize("after", ["99999999999999999999", "١٢", "-1"])
def test_a_bad_timeline_cursor_is_a_400_problem(viewer, facts, after):
    run = interrupted_with_plan()

    is_problem(viewer.get(f"/runs/{run.public_id}/events", after=after), 400)


@pytest.mark.parametrize("limit", ["0", "100000000000000000000000", "١٠", "ten"])
def test_a_bad_limit_is_a_4xx_problem(viewer, limit):
    response = viewer.get("/runs", limit=limit)

    assert response.status_code in (400, 422)
    is_problem(response, response.status_code)


def test_a_huge_notice_id_is_a_400_problem(viewer):
    is_problem(viewer.get("/runs", notice="9" * 30), 400)


def test_a_body_that_is_not_json_is_a_400_problem(operator):
    body = is_problem(operator.post("/runs", raw=b"pipeline=content"), 400)

    assert "JSON" in body["detail"]
    assert Run.objects.count() == 0


def test_an_empty_body_is_a_4xx_problem(operator):
    response = operator.post("/runs", raw=b"")

    assert response.status_code in (400, 422)
    is_problem(response, response.status_code)
    assert Run.objects.count() == 0


def test_a_body_without_its_fields_is_a_422_problem_naming_them(operator, facts):
    run = interrupted_with_plan()

    body = is_problem(operator.post(f"/runs/{run.public_id}/approve", {}), 422)

    assert {tuple(e["loc"])[-1] for e in body["errors"]} == {"mode", "fingerprint"}


def test_a_schema_error_names_the_fields_as_the_caller_wrote_them(operator, facts):
    run = interrupted_with_plan()

    missing = is_problem(operator.post(f"/runs/{run.public_id}/approve", {}), 422)
    empty = is_problem(operator.post("/runs", raw=b"{}"), 422)

    # Not `body.body.mode`: the view's parameter name is the code's, not the request's.
    assert sorted(e["loc"] for e in missing["errors"]) == [
        ["body", "fingerprint"],
        ["body", "mode"],
    ]
    assert "body.mode" in missing["detail"] and "body.body" not in missing["detail"]
    assert [e["loc"] for e in empty["errors"]] == [["body", "pipeline"]]
    assert Run.objects.count() == 1


def test_a_huge_body_is_a_413_problem(operator):
    huge = b'{"pipeline": "content", "inputs": {"x": "' + b"a" * 3_000_000 + b'"}}'

    is_problem(operator.post("/runs", raw=huge), 413)
    assert Run.objects.count() == 0


def test_a_huge_input_value_is_a_422_problem(operator, facts):
    is_problem(
        operator.post("/runs", {"pipeline": "content", "inputs": {"topic": "a" * 5000}}), 422
    )

    assert Run.objects.count() == 0


def test_an_unknown_approval_mode_is_a_422_problem(operator, facts):
    run = interrupted_with_plan()

    is_problem(
        operator.post(f"/runs/{run.public_id}/approve", {"mode": "yolo", "fingerprint": "0" * 64}),
        422,
    )
    assert not Event.objects.filter(type=Event.Type.PLAN_APPROVED).exists()


def test_a_wrong_method_is_a_405_problem_naming_the_allowed_ones(viewer):
    response = viewer.get("/runs/run-1/approve")

    body = is_problem(response, 405)
    assert response.headers["Allow"] == "POST"
    assert body["allow"] == ["POST"] and "takes POST" in body["detail"]


def test_a_limit_that_is_not_a_number_is_a_400_as_one_out_of_range_is(viewer):
    assert "limit" in is_problem(viewer.get("/runs", limit="abc"), 400)["detail"]
    assert "limit" in is_problem(viewer.get("/runs", limit="0"), 400)["detail"]


@pytest.mark.parametrize("effect", ["abc", "0", "99999999999999999999999", "٣"])
def test_an_effect_id_that_names_no_effect_is_a_404_whatever_its_text(operator, facts, effect):
    run = interrupted_with_plan()

    body = is_problem(operator.post(f"/runs/{run.public_id}/effects/{effect}/ask-supervisor"), 404)

    assert "has no effect" in body["detail"]

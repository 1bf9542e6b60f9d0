"""Runs through the API: the inbox's list (its filters, keyset paging, constant queries), one
run, its timeline by seq, its effects, starting one."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs import engine
from runs.models import Event, Run, StoredPlan
from tests.api.conftest import is_problem
from tests.support.plans import interrupted_with_plan, stopped_with_plan

pytestmark = pytest.mark.django_db


def pending_runs(count: int) -> list[Run]:
    return [engine.start_run("content", {}, actor="test", enqueue=False) for _ in range(count)]


def test_the_list_puts_runs_that_need_a_human_first_with_why(viewer, facts):
    pending_runs(2)
    stopped = interrupted_with_plan()

    body = viewer.get("/runs").json()

    assert body["items"][0]["id"] == stopped.public_id
    assert body["items"][0]["needs_human"] is True
    assert body["items"][0]["stop"]["why"]
    # The calls the stored plan's strict resume makes: the stage the stop cut short, again.
    assert body["items"][0]["stop"]["plan"]["resume_calls"] == (
        StoredPlan.objects.get(run=stopped).resume_calls
    )
    assert body["items"][0]["stop"]["plan"]["resume_calls"] > 0
    assert body["needs_human"] == 1
    assert len(body["items"]) == 3


def test_the_list_filters_as_the_inbox_does(viewer, facts):
    pending_runs(2)
    stopped = interrupted_with_plan()

    by_reason = viewer.get("/runs", reason="interrupted").json()
    by_status = viewer.get("/runs", status="pending").json()

    assert [r["id"] for r in by_reason["items"]] == [stopped.public_id]
    assert {r["status"] for r in by_status["items"]} == {"pending"}
    assert len(by_status["items"]) == 2


def test_a_bad_filter_is_a_problem_with_the_forms_errors(viewer):
    body = is_problem(viewer.get("/runs", reason="bored"), 422)

    assert "reason" in body["errors"]


def test_keyset_paging_walks_every_run_once(viewer):
    made = pending_runs(7)

    seen, after = [], None
    while True:
        params = {"limit": 3, **({"after": after} if after else {})}
        body = viewer.get("/runs", **params).json()
        seen += [r["id"] for r in body["items"]]
        after = body["next_after"]
        if after is None:
            break

    assert sorted(seen) == sorted(run.public_id for run in made)
    assert len(seen) == 7


def test_the_list_reads_the_same_number_of_queries_for_3_and_30_runs(viewer, facts):
    def counted() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert viewer.get("/runs").status_code == 200
        return len(queries)

    interrupted_with_plan()
    pending_runs(2)
    counted()  # the token's first use is written once (then at most once a minute)
    few = counted()
    pending_runs(27)

    assert counted() == few


def test_a_run_reads_as_its_page_shows_it(viewer):
    run = pending_runs(1)[0]

    body = viewer.get(f"/runs/{run.public_id}").json()

    assert body["id"] == run.public_id
    assert body["inputs"] == run.inputs
    assert [step["stage"] for step in body["progress"]][0] == run.current_stage


def test_a_run_reads_the_same_number_of_queries_whatever_its_history(viewer, facts):
    short = pending_runs(1)[0]
    long = stopped_with_plan()

    def counted(run: Run) -> int:
        with CaptureQueriesContext(connection) as queries:
            assert viewer.get(f"/runs/{run.public_id}").status_code == 200
        return len(queries)

    counted(short)  # the token's first use is written once (then at most once a minute)
    assert counted(long) == counted(short)


def test_the_timeline_comes_in_pages_by_seq(viewer, facts):
    run = stopped_with_plan()

    first = viewer.get(f"/runs/{run.public_id}/events", limit=5).json()
    second = viewer.get(f"/runs/{run.public_id}/events", limit=5, after=first["next_after"]).json()

    assert [e["seq"] for e in first["items"]] == [1, 2, 3, 4, 5]
    assert [e["seq"] for e in second["items"]] == [6, 7, 8, 9, 10]
    assert first["items"][0]["type"] == Event.Type.RUN_CREATED


def test_the_last_timeline_page_says_there_is_no_next(viewer):
    run = pending_runs(1)[0]

    body = viewer.get(f"/runs/{run.public_id}/events").json()

    assert len(body["items"]) == run.last_seq
    assert body["next_after"] is None


def test_the_effects_are_the_runs_ledger(viewer, facts):
    run = stopped_with_plan({"timeout": "visual/upload-cover/after"})

    body = viewer.get(f"/runs/{run.public_id}/effects").json()

    assert {e["call_id"] for e in body} == set(run.effects.values_list("call_id", flat=True))
    assert any(e["status"] == "unknown" for e in body)


def test_starting_a_run_pins_its_inputs_and_records_the_user(operator, facts):
    response = operator.post("/runs", {"pipeline": "content", "inputs": {}})

    assert response.status_code == 201
    run = Run.objects.get(pk=int(response.json()["id"].removeprefix("run-")))
    created = Event.objects.get(run=run, seq=1)
    assert created.actor == f"user:{operator.user.username}"
    assert run.inputs["facts"]


def test_starting_a_run_with_an_unknown_input_is_a_422_problem(operator, facts):
    body = is_problem(operator.post("/runs", {"pipeline": "content", "inputs": {"nope": "1"}}), 422)

    assert body["type"].endswith("invalid-input")
    assert Run.objects.count() == 0


def test_a_misspelt_field_is_a_422_naming_it_and_starts_no_run(operator, facts):
    # `input` for `inputs`: taken silently, the run would start with every default.
    response = operator.post("/runs", {"pipeline": "content", "input": {"topic": "Tides"}})

    body = is_problem(response, 422)
    assert "input" in str(body["errors"]) and "Extra inputs are not permitted" in str(body)
    assert Run.objects.count() == 0


@pytest.mark.parametrize("value", [42, 4.5, True, None])
def test_an_input_that_is_not_text_an_object_or_a_list_is_one_error_saying_so(
    operator, facts, value
):
    response = operator.post("/runs", {"pipeline": "content", "inputs": {"topic": value}})

    body = is_problem(response, 422)
    assert body["errors"] == [
        {
            "loc": ["body", "inputs", "topic"],
            "msg": 'Value error, an input is text (a number as text: "42"), a JSON object or a list',
        }
    ]
    assert Run.objects.count() == 0


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_input_is_a_422_naming_it_not_its_default(operator, facts, blank):
    response = operator.post("/runs", {"pipeline": "content", "inputs": {"topic": blank}})

    body = is_problem(response, 422)
    assert body["input"] == "topic"
    assert (
        "input topic is blank: give it a value (leave it out to pin its default)"
        in (body["detail"])
    )
    assert Run.objects.count() == 0


def test_a_topic_the_source_has_no_facts_for_is_a_422_naming_the_topic(operator, facts):
    response = operator.post("/runs", {"pipeline": "content", "inputs": {"topic": "nothing-yet"}})

    body = is_problem(response, 422)
    assert body["input"] == "topic"
    assert "the search source has no facts for topic 'nothing-yet'" in body["detail"]
    assert Run.objects.count() == 0


def test_starting_a_run_of_an_unknown_pipeline_is_a_422_problem(operator):
    is_problem(operator.post("/runs", {"pipeline": "nothing-here"}), 422)

    assert Run.objects.count() == 0

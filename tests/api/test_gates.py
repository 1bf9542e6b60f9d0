"""Gates through the API: the open ones, one, and an answer through gates.answers.answer
(the gate's role, its form, "already answered by X at T")."""

from __future__ import annotations

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.gates import answers
from runs.models import Event, Gate, GateStatus
from tests.api.conftest import is_problem

pytestmark = pytest.mark.django_db


@pytest.fixture
def review(facts) -> Gate:
    """A run waiting at the editorial review (an operator's gate)."""
    run = engine.start_run("content", {"review": "on"}, actor="test", enqueue=False)
    run_inline(run.pk)
    return Gate.objects.get(run=run, gate_id="review")


def charge_gate(review: Gate) -> Gate:
    """The same run, reviewed, waiting for a supervisor to confirm its charge."""
    answers.answer(review.pk, dict(review.initial), actor="ana", roles={"operator"})
    run_inline(review.run_id)
    return Gate.objects.get(run_id=review.run_id, gate_id="promote-charge")


def answered(gate: Gate) -> int:
    return Event.objects.filter(run_id=gate.run_id, type=Event.Type.HUMAN_ANSWERED).count()


def test_the_open_gates_are_listed_oldest_first(viewer, review):
    body = viewer.get("/gates").json()

    assert [g["id"] for g in body["items"]] == [review.pk]
    assert body["items"][0]["run"] == f"run-{review.run_id}"
    assert body["next_after"] is None


def test_a_gate_reads_with_its_form_and_initial_values(viewer, review):
    body = viewer.get(f"/gates/{review.pk}").json()

    assert body["question"] == review.question
    assert {f["name"] for f in body["form"]} >= {"decision", "title"}
    assert body["status"] == "open"


def test_an_operator_answers_a_review_as_themselves(operator, review):
    response = operator.post(
        f"/gates/{review.pk}/answer", {"answer": {**review.initial, "title": "From the API"}}
    )

    assert response.status_code == 200
    review.refresh_from_db()
    assert review.status == GateStatus.ANSWERED
    assert review.answered_by == f"user:{operator.user.username}"
    assert review.answer["title"] == "From the API"


def test_an_answer_that_does_not_fit_the_form_is_a_422_with_its_errors(operator, review):
    body = is_problem(
        operator.post(
            f"/gates/{review.pk}/answer", {"answer": {**review.initial, "decision": "x"}}
        ),
        422,
    )

    assert "decision" in body["errors"]
    assert answered(review) == 0


def test_a_second_answer_is_a_409_naming_who_answered_first(operator, supervisor, review):
    operator.post(f"/gates/{review.pk}/answer", {"answer": dict(review.initial)})

    body = is_problem(
        supervisor.post(f"/gates/{review.pk}/answer", {"answer": dict(review.initial)}), 409
    )

    assert f"already answered by user:{operator.user.username} at" in body["detail"]
    assert answered(review) == 1


def test_an_operator_may_not_answer_a_supervisors_gate(operator, review):
    charge = charge_gate(review)

    is_problem(operator.post(f"/gates/{charge.pk}/answer", {"answer": dict(charge.initial)}), 403)

    assert Gate.objects.get(pk=charge.pk).status == GateStatus.OPEN


def test_a_supervisor_confirms_the_charge(supervisor, review):
    charge = charge_gate(review)

    response = supervisor.post(f"/gates/{charge.pk}/answer", {"answer": dict(charge.initial)})

    assert response.status_code == 200
    assert Gate.objects.get(pk=charge.pk).answered_by == "user:supervisor"


def test_the_same_answer_with_the_same_key_answers_once(operator, review):
    body = {"answer": dict(review.initial)}
    first = operator.post(f"/gates/{review.pk}/answer", body, key="bot-1")

    again = operator.post(f"/gates/{review.pk}/answer", body, key="bot-1")

    assert again.status_code == first.status_code == 200
    assert again.json() == first.json()
    assert answered(review) == 1


def test_the_open_gates_come_in_keyset_pages(viewer, review, facts):
    later = engine.start_run("content", {"review": "on"}, actor="test", enqueue=False)
    run_inline(later.pk)

    first = viewer.get("/gates", limit=1).json()
    second = viewer.get("/gates", limit=1, after=first["next_after"]).json()

    assert [g["id"] for g in first["items"] + second["items"]] == list(
        Gate.objects.order_by("created_at", "pk").values_list("pk", flat=True)
    )
    assert second["next_after"] is None


# --- Typed answers -----------------------------------------------------------------------------


def written(gate: Gate) -> tuple:
    """What an answer would have changed: the run's log and the gate's row."""
    gate.refresh_from_db()
    row = (gate.status, gate.votes, gate.answer, gate.diff, gate.answered_by, gate.answer_seq)
    return Event.objects.filter(run_id=gate.run_id).count(), row


def test_an_amount_the_charge_refuses_is_a_422_naming_its_field_and_writes_nothing(
    supervisor, review
):
    charge = charge_gate(review)
    before = written(charge)
    path = f"/gates/{charge.pk}/answer"

    for amount in ("abc", "five", "-3", "nan", "inf", "100.01", 5000, -3, True, [20]):
        answer = {"decision": "approve", "arg_amount": amount}
        body = is_problem(supervisor.post(path, {"answer": answer}), 422)
        assert list(body["errors"]) == ["arg_amount"], amount
    # JSON's NaN and Infinity, which Python's json reads as floats.
    for literal in (b"NaN", b"Infinity", b"-Infinity", b"1e999"):
        raw = b'{"answer": {"decision": "approve", "arg_amount": ' + literal + b"}}"
        body = is_problem(supervisor.post(path, raw=raw), 422)
        assert list(body["errors"]) == ["arg_amount"], literal

    assert written(charge) == before


def test_a_typed_amount_is_checked_and_sent_as_the_processor_reads_it(supervisor, review):
    charge = charge_gate(review)

    response = supervisor.post(
        f"/gates/{charge.pk}/answer", {"answer": {"decision": "approve", "arg_amount": 20}}
    )

    assert response.status_code == 200
    charge.refresh_from_db()
    assert charge.answer["args"]["amount"] == "20.00" and charge.answer["cost"] == "20.00"
    assert charge.diff == {"amount": ["5.00", "20.00"]}


def test_a_text_field_given_an_object_is_a_422_not_its_python_text(operator, review):
    body = is_problem(
        operator.post(
            f"/gates/{review.pk}/answer", {"answer": {**review.initial, "title": {"a": 1}}}
        ),
        422,
    )

    assert list(body["errors"]) == ["title"]
    assert answered(review) == 0

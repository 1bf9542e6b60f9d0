"""Gates through the API: the open ones, one, and an answer through gates.answers.answer
(the gate's role, its form, "already answered by X at T", the deadline, one vote per
person whether by session or by token)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models.functions import Now

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.gates import answers
from runs.gates.acts import TICK
from runs.gates.decision import gate_digest
from runs.models import Event, Gate, GateStatus
from tests.api.conftest import is_problem
from tests.support.web import client_as

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


def sent(gate: Gate, **answer) -> dict:
    """An answer as a client sends it: the form's fields and the digest of the gate it read."""
    return {"answer": {**gate.initial, **answer}, "digest": gate_digest(gate)}


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
    response = operator.post(f"/gates/{review.pk}/answer", sent(review, title="From the API"))

    assert response.status_code == 200
    review.refresh_from_db()
    assert review.status == GateStatus.ANSWERED
    assert review.answered_by == f"user:{operator.user.username}"
    assert review.answer["title"] == "From the API"


def test_an_answer_that_does_not_fit_the_form_is_a_422_with_its_errors(operator, review):
    body = is_problem(
        operator.post(f"/gates/{review.pk}/answer", sent(review, decision="x")),
        422,
    )

    assert "decision" in body["errors"]
    assert answered(review) == 0


def test_a_second_answer_is_a_409_naming_who_answered_first(operator, supervisor, review):
    operator.post(f"/gates/{review.pk}/answer", sent(review))

    body = is_problem(supervisor.post(f"/gates/{review.pk}/answer", sent(review)), 409)

    assert f"already answered by user:{operator.user.username} at" in body["detail"]
    assert body["type"].endswith("/already-answered")
    assert answered(review) == 1


def test_an_answer_to_a_gate_closed_with_its_run_is_not_answerable_not_already_answered(
    operator, supervisor, review
):
    closed = supervisor.post(f"/runs/{review.run.public_id}/close", {"reason": "not needed"})
    assert closed.status_code == 200, closed.content

    body = is_problem(operator.post(f"/gates/{review.pk}/answer", sent(review)), 409)

    assert body["type"].endswith("/not-answerable") and "closed with its run" in body["detail"]
    assert answered(review) == 0


def test_a_second_answer_that_does_not_fit_is_a_409_not_the_forms_errors(
    operator, supervisor, review
):
    # Its form errors would be about a question nobody can answer any more.
    operator.post(f"/gates/{review.pk}/answer", sent(review))

    late = sent(review, title="")
    body = is_problem(supervisor.post(f"/gates/{review.pk}/answer", late), 409)

    assert "already answered by" in body["detail"] and "errors" not in body
    assert answered(review) == 1


def test_an_operator_may_not_answer_a_supervisors_gate(operator, review):
    charge = charge_gate(review)

    is_problem(operator.post(f"/gates/{charge.pk}/answer", sent(charge, **{TICK: True})), 403)

    assert Gate.objects.get(pk=charge.pk).status == GateStatus.OPEN


def test_a_supervisor_confirms_the_charge(supervisor, review):
    charge = charge_gate(review)

    response = supervisor.post(f"/gates/{charge.pk}/answer", sent(charge, **{TICK: True}))

    assert response.status_code == 200
    assert Gate.objects.get(pk=charge.pk).answered_by == "user:supervisor"


def test_the_same_answer_with_the_same_key_answers_once(operator, review):
    first = operator.post(f"/gates/{review.pk}/answer", sent(review), key="bot-1")

    again = operator.post(f"/gates/{review.pk}/answer", sent(review), key="bot-1")

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


def test_an_answer_after_the_deadline_is_a_409_and_records_nothing(operator, review):
    Gate.objects.filter(pk=review.pk).update(
        deadline=Now() - timedelta(seconds=2), on_timeout={"answer": dict(review.initial)}
    )

    body = is_problem(
        operator.post(f"/gates/{review.pk}/answer", sent(Gate.objects.get(pk=review.pk))), 409
    )

    assert body["type"].endswith("/deadline-passed")
    assert "the time-out records the default answer" in body["detail"]
    assert answered(review) == 0
    assert Gate.objects.get(pk=review.pk).status == GateStatus.OPEN


# --- The digest of what was read, and the tick that names the act ----------------------------


def test_a_gate_reads_with_its_digest_and_a_charge_with_its_act(viewer, supervisor, review):
    charge = charge_gate(review)

    read = supervisor.get(f"/gates/{charge.pk}").json()

    assert read["digest"] == gate_digest(charge)
    assert read["act"] == "charges $5.00 to acct-42 (card)"
    assert "**The promotion fee**" in read["details"]
    assert viewer.get(f"/gates/{review.pk}").json()["act"] == ""


def test_an_answer_without_a_digest_is_a_422_and_writes_nothing(operator, review):
    is_problem(operator.post(f"/gates/{review.pk}/answer", {"answer": dict(review.initial)}), 422)

    assert answered(review) == 0


def test_an_answer_with_a_stale_digest_is_a_409_with_the_fresh_one_and_writes_nothing(
    operator, review
):
    stale = {"answer": dict(review.initial), "digest": "0" * 64}

    problem = is_problem(operator.post(f"/gates/{review.pk}/answer", stale), 409)

    assert problem["digest"] == gate_digest(review)
    assert problem["type"].endswith("/stale-gate")
    assert answered(review) == 0
    assert Gate.objects.get(pk=review.pk).status == GateStatus.OPEN


def test_one_person_votes_once_by_session_and_by_token(operator, supervisor, review):
    Gate.objects.filter(pk=review.pk).update(quorum=2)
    page = f"/runs/run-{review.run_id}/gates/{review.pk}/answer/"
    gate = Gate.objects.get(pk=review.pk)
    # The same user's session.
    voted = client_as("operator").post(page, {**review.initial, "digest": gate_digest(gate)})

    again = operator.post(f"/gates/{review.pk}/answer", sent(gate))

    assert voted.status_code == 302
    assert "you answered already" in is_problem(again, 409)["detail"]
    gate = Gate.objects.get(pk=review.pk)
    assert gate.status == GateStatus.OPEN
    assert [v["user"] for v in gate.votes] == [operator.user.pk]
    # Another person's vote settles it.
    second = supervisor.post(f"/gates/{review.pk}/answer", sent(gate))
    assert second.json()["final"] is True
    assert answered(review) == 2


def test_approving_a_charge_without_the_tick_is_a_422_naming_the_act(supervisor, review):
    charge = charge_gate(review)

    problem = is_problem(supervisor.post(f"/gates/{charge.pk}/answer", sent(charge)), 422)

    assert "charges $5.00 to acct-42 (card)" in problem["errors"][TICK][0]["message"]
    assert Gate.objects.get(pk=charge.pk).status == GateStatus.OPEN


@pytest.mark.parametrize("tick", ["off", "yes", "no", 1, "true"])
def test_a_tick_that_is_not_true_is_a_422_of_the_box_and_nothing_is_answered(
    supervisor, review, tick
):
    charge = charge_gate(review)
    before = answered(charge)

    response = supervisor.post(f"/gates/{charge.pk}/answer", sent(charge, **{TICK: tick}))

    problem = is_problem(response, 422)
    assert "Tick the box to approve (true through the API)" in problem["errors"][TICK][0]["message"]
    assert f"{TICK}: Tick the box" in problem["detail"] and "&#" not in problem["detail"]
    assert Gate.objects.get(pk=charge.pk).status == GateStatus.OPEN
    assert answered(charge) == before


@pytest.mark.parametrize(
    "answer",
    [{"arg_account": "acct-9"}, {"bogus": 1}],
    ids=["an-argument-that-is-not-editable", "a-typo"],
)
def test_a_field_the_form_does_not_have_is_a_422_naming_it(supervisor, review, answer):
    charge = charge_gate(review)
    before = answered(charge)

    response = supervisor.post(f"/gates/{charge.pk}/answer", sent(charge, **{TICK: True}, **answer))

    problem = is_problem(response, 422)
    (name,) = answer
    assert problem["errors"] == {name: [{"message": "not a field of this gate's form"}]}
    assert f"this gate's form has no field {name}" in problem["detail"]
    assert (Gate.objects.get(pk=charge.pk).status, answered(charge)) == (GateStatus.OPEN, before)


def test_a_field_beside_the_answer_is_a_422(supervisor, review):
    charge = charge_gate(review)

    body = {**sent(charge, **{TICK: True}), "approve": True}
    is_problem(supervisor.post(f"/gates/{charge.pk}/answer", body), 422)

    assert Gate.objects.get(pk=charge.pk).status == GateStatus.OPEN


def test_the_openapi_description_says_an_answer_needs_the_digest(viewer):
    schema = viewer.get("/openapi.json").json()

    digest = schema["components"]["schemas"]["AnswerIn"]["properties"]["digest"]
    assert "Required" in digest["description"]
    assert "digest" in schema["components"]["schemas"]["AnswerIn"]["required"]


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
    digest = gate_digest(charge)

    for amount in ("abc", "five", "-3", "nan", "inf", "100.01", 5000, -3, True, [20]):
        answer = {"decision": "approve", TICK: True, "arg_amount": amount}
        body = is_problem(supervisor.post(path, {"answer": answer, "digest": digest}), 422)
        assert list(body["errors"]) == ["arg_amount"], amount
    # JSON's NaN and Infinity, which Python's json reads as floats.
    for literal in (b"NaN", b"Infinity", b"-Infinity", b"1e999"):
        raw = (
            b'{"digest": "%s", "answer": {"decision": "approve", "confirm_act": true, '
            b'"arg_amount": %s}}' % (digest.encode(), literal)
        )
        body = is_problem(supervisor.post(path, raw=raw), 422)
        assert list(body["errors"]) == ["arg_amount"], literal

    assert written(charge) == before


@pytest.mark.parametrize("amount", ["abc", "-3"])
def test_a_refused_amount_and_a_missing_tick_are_said_at_once(supervisor, review, amount):
    # "abc" the form refuses, "-3" the tool's own schema: either is said beside the tick.
    charge = charge_gate(review)
    before = written(charge)
    answer = {"decision": "approve", "arg_amount": amount}

    body = is_problem(
        supervisor.post(
            f"/gates/{charge.pk}/answer", {"answer": answer, "digest": gate_digest(charge)}
        ),
        422,
    )

    assert sorted(body["errors"]) == sorted(["arg_amount", TICK])
    assert written(charge) == before


def test_a_typed_amount_is_checked_and_sent_as_the_processor_reads_it(supervisor, review):
    charge = charge_gate(review)

    response = supervisor.post(
        f"/gates/{charge.pk}/answer",
        {
            "answer": {"decision": "approve", TICK: True, "arg_amount": 20},
            "digest": gate_digest(charge),
        },
    )

    assert response.status_code == 200
    charge.refresh_from_db()
    assert charge.answer["args"]["amount"] == "20.00" and charge.answer["cost"] == "20.00"
    assert charge.diff == {"amount": ["5.00", "20.00"]}


def test_a_text_field_given_an_object_is_a_422_not_its_python_text(operator, review):
    body = is_problem(
        operator.post(
            f"/gates/{review.pk}/answer",
            {"answer": {**review.initial, "title": {"a": 1}}, "digest": gate_digest(review)},
        ),
        422,
    )

    assert list(body["errors"]) == ["title"]
    assert answered(review) == 0


def test_requesting_changes_without_notes_is_a_422_of_the_notes_and_records_nothing(
    operator, review
):
    # The demo's ReviewForm.clean() is the stage's rule, applied where the gate is answered.
    body = is_problem(
        operator.post(f"/gates/{review.pk}/answer", sent(review, decision="request_changes")),
        422,
    )

    assert "Say what to change" in body["errors"]["notes"][0]["message"]
    assert answered(review) == 0
    review.refresh_from_db()
    assert review.status == GateStatus.OPEN
    assert review.form_class == "demo.pipeline.ReviewForm"


def test_requesting_changes_with_notes_is_recorded_with_them(operator, review):
    response = operator.post(
        f"/gates/{review.pk}/answer",
        sent(review, decision="request_changes", notes="Cite the benchmark"),
    )

    assert response.status_code == 200
    review.refresh_from_db()
    assert (review.answer["decision"], review.answer["notes"]) == (
        "request_changes",
        "Cite the benchmark",
    )

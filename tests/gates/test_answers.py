"""Answering a gate in this process (runs/gates/answers.py): the form decides what is an
answer, the role who may give it, and a refused answer writes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db.models.functions import Now

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.gates import answers
from runs.models import Event, Gate, GateStatus, Run

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = frozenset({"operator"})
SUPERVISOR = frozenset({"supervisor"})
VIEWER = frozenset({"viewer"})


def waiting_at_review() -> Gate:
    run = engine.start_run("content", {"review": "on"}, actor="test", enqueue=False)
    run_inline(run.pk)
    return Gate.objects.get(run=run, gate_id="review")


def waiting_at_charge() -> Gate:
    review = waiting_at_review()
    answers.answer(review.pk, dict(review.initial), actor="ana", roles=OPERATOR)
    run_inline(review.run_id)
    return Gate.objects.get(run_id=review.run_id, gate_id="promote-charge")


def answered_events(gate: Gate) -> int:
    return Event.objects.filter(run_id=gate.run_id, type=Event.Type.HUMAN_ANSWERED).count()


def test_an_answer_records_who_what_and_the_diff_and_queues_the_stage(facts, redis_conn):
    gate = waiting_at_review()

    answers.answer(gate.pk, {**gate.initial, "title": "New title"}, actor="ana", roles=OPERATOR)

    gate.refresh_from_db()
    assert (gate.status, gate.answered_by) == (GateStatus.ANSWERED, "ana")
    event = Event.objects.get(run_id=gate.run_id, type=Event.Type.HUMAN_ANSWERED)
    assert event.actor == "ana" and event.payload["by"] == "ana"
    assert event.payload["diff"] == {"title": [gate.initial["title"], "New title"]}
    run = Run.objects.get(pk=gate.run_id)
    assert (run.status, run.current_stage) == (Run.Status.RUNNING, "publish")
    assert run.ticket


def test_a_viewer_may_not_answer_and_nothing_is_written(facts):
    gate = waiting_at_review()

    with pytest.raises(answers.NotAllowed):
        answers.answer(gate.pk, dict(gate.initial), actor="vic", roles=VIEWER)

    assert answered_events(gate) == 0
    assert Run.objects.get(pk=gate.run_id).status == Run.Status.WAITING


def test_an_answer_the_form_refuses_writes_nothing(facts):
    gate = waiting_at_review()

    with pytest.raises(answers.InvalidAnswer) as refused:
        answers.answer(gate.pk, {**gate.initial, "decision": "shrug"}, actor="ana", roles=OPERATOR)

    assert "decision" in refused.value.form.errors
    assert answered_events(gate) == 0


def test_a_second_answer_is_told_who_answered_first_and_changes_nothing(facts, redis_conn):
    gate = waiting_at_review()
    answers.answer(gate.pk, dict(gate.initial), actor="ana", roles=OPERATOR)

    with pytest.raises(answers.AlreadyAnswered, match="already answered by ana at"):
        answers.answer(gate.pk, {**gate.initial, "title": "Other"}, actor="bob", roles=OPERATOR)

    gate.refresh_from_db()
    assert gate.answer["title"] == Gate.objects.get(pk=gate.pk).initial["title"]
    assert answered_events(gate) == 1


def test_a_supervisor_may_answer_an_operators_gate(facts, redis_conn):
    gate = waiting_at_review()

    answers.answer(gate.pk, dict(gate.initial), actor="sam", roles=SUPERVISOR)

    assert Gate.objects.get(pk=gate.pk).answered_by == "sam"


def test_a_rejected_confirmation_needs_a_reason(facts, redis_conn):
    gate = waiting_at_charge()

    with pytest.raises(answers.InvalidAnswer, match="reason"):
        answers.answer(gate.pk, {"decision": "reject"}, actor="sam", roles=SUPERVISOR)

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


def test_a_rejected_charge_is_declined_by_the_demo_and_never_made(facts, demo_service, redis_conn):
    gate = waiting_at_charge()

    answers.answer(
        gate.pk, {"decision": "reject", "reason": "no budget"}, actor="sam", roles=SUPERVISOR
    )
    run = run_inline(gate.run_id)

    assert run.status == Run.Status.SUCCEEDED
    assert demo_service.charges() == []
    assert not run.effects.filter(call_id="promote-charge").exists()
    publish = run.checkpoints.get(stage="publish")
    assert publish.outputs["charge"] == "declined" and publish.outputs["declined"] == "no budget"


def test_an_unknown_gate_is_refused(db):
    with pytest.raises(answers.AnswerRefused, match="no gate"):
        answers.answer(10**12, {}, actor="ana", roles=OPERATOR)


def test_a_bulk_review_keeps_each_runs_own_title_and_body(facts, redis_conn):
    first, second = waiting_at_review(), waiting_at_review()

    result = answers.answer_many(
        [first.pk, second.pk],
        {"decision": "approve"},
        shape=first.shape,
        actor="ana",
        roles=OPERATOR,
    )

    assert len(result.answered) == 2 and result.skipped == []
    for gate in (first, second):
        gate.refresh_from_db()
        assert gate.answer["title"] == gate.initial["title"]
        assert gate.answer["body"] == gate.initial["body"]
        assert gate.diff == {}


# --- Deadlines: an answer after one is refused, on the database's clock ----------------------


def with_deadline(gate: Gate, seconds: int, **fields) -> Gate:
    """The gate with its deadline `seconds` from the database's now (negative: passed)."""
    Gate.objects.filter(pk=gate.pk).update(deadline=Now() + timedelta(seconds=seconds), **fields)
    return Gate.objects.get(pk=gate.pk)


def test_an_answer_after_the_deadline_is_refused_and_writes_nothing_before_any_sweep(facts):
    gate = with_deadline(waiting_at_review(), -2, on_timeout={"fail": True, "reason": "late"})
    version = Run.objects.get(pk=gate.run_id).version

    with pytest.raises(answers.DeadlinePassed, match="the deadline passed at .*fails the run"):
        answers.answer(gate.pk, dict(gate.initial), actor="ana", roles=OPERATOR)

    run = Run.objects.get(pk=gate.run_id)
    assert (run.status, run.version, run.ticket) == (Run.Status.WAITING, version, "")
    gate.refresh_from_db()
    assert (gate.status, gate.votes, gate.answered_by) == (GateStatus.OPEN, [], "")
    assert answered_events(gate) == 0


def test_an_answer_before_the_deadline_is_recorded(facts, redis_conn):
    gate = with_deadline(waiting_at_review(), 3600)

    answers.answer(gate.pk, dict(gate.initial), actor="ana", roles=OPERATOR)

    assert Gate.objects.get(pk=gate.pk).answered_by == "ana"


# --- A quorum: votes of different signed-in people ------------------------------------------


def waiting_for_two() -> Gate:
    gate = waiting_at_review()
    Gate.objects.filter(pk=gate.pk).update(quorum=2)
    return Gate.objects.get(pk=gate.pk)


def person(name: str) -> int:
    return User.objects.create_user(name).pk


def test_the_same_user_cannot_vote_twice_under_another_name(facts):
    gate, ana = waiting_for_two(), person("ana")
    answers.answer(gate.pk, dict(gate.initial), actor="user:ana", roles=OPERATOR, user=ana)

    with pytest.raises(answers.AnswerRefused, match="you answered already"):
        answers.answer(gate.pk, dict(gate.initial), actor="token-of-ana", roles=OPERATOR, user=ana)

    gate.refresh_from_db()
    assert gate.status == GateStatus.OPEN
    assert [(v["by"], v["user"]) for v in gate.votes] == [("user:ana", ana)]
    assert answered_events(gate) == 1


def test_two_different_users_settle_a_quorum_gate_and_each_vote_names_its_user(facts, redis_conn):
    gate, ana, bob = waiting_for_two(), person("ana"), person("bob")

    first = answers.answer(gate.pk, dict(gate.initial), actor="user:ana", roles=OPERATOR, user=ana)
    second = answers.answer(gate.pk, dict(gate.initial), actor="user:bob", roles=OPERATOR, user=bob)

    assert (first.final, first.missing, second.final) == (False, 1, True)
    gate.refresh_from_db()
    assert gate.status == GateStatus.ANSWERED
    assert [v["user"] for v in gate.votes] == [ana, bob]
    events = Event.objects.filter(run_id=gate.run_id, type=Event.Type.HUMAN_ANSWERED)
    assert sorted(e.payload["user"] for e in events) == sorted([ana, bob])


def test_a_vote_towards_a_quorum_needs_a_signed_in_user(facts):
    gate = waiting_for_two()

    with pytest.raises(answers.AnswerRefused, match="signed-in person"):
        answers.answer(gate.pk, dict(gate.initial), actor="script", roles=OPERATOR)

    assert answered_events(gate) == 0

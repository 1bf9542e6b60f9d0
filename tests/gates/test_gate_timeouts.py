"""The sweeper's step for gates (runs/gates/timeouts.py), run in this process: a deadline
applies on_timeout whatever the votes (a time-out is not a vote), an overdue gate is logged
once, an escalation is announced once. Deadlines are moved into the past with
an update instead of waiting for them."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db.models.functions import Now

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.gates import answers, timeouts
from runs.models import Event, Gate, GateStatus, Notification, NotificationRun, Run

pytestmark = pytest.mark.django_db(transaction=True)


def waiting_review(on_timeout: dict, escalate_to: str = "") -> Gate:
    run = engine.start_run("content", {"review": "on"}, actor="test", enqueue=False)
    run_inline(run.pk)
    gate = Gate.objects.get(run=run, gate_id="review")
    Gate.objects.filter(pk=gate.pk).update(on_timeout=on_timeout, escalate_to=escalate_to)
    return gate


def past(gate: Gate, field: str) -> None:
    Gate.objects.filter(pk=gate.pk).update(**{field: Now() - timedelta(seconds=1)})


def test_a_passed_deadline_records_the_default_answer_as_the_time_outs(facts, redis_conn):
    gate = waiting_review({"answer": {"decision": "approve", "title": "T", "body": "B"}})
    past(gate, "deadline")

    assert timeouts.sweep() == [gate.pk]

    gate.refresh_from_db()
    assert (gate.status, gate.answered_by) == (GateStatus.ANSWERED, "time-out")
    assert Run.objects.get(pk=gate.run_id).status == Run.Status.RUNNING


def test_a_passed_deadline_that_fails_fails_the_run_with_the_reason(facts):
    gate = waiting_review({"fail": True, "reason": "nobody reviewed it"})
    past(gate, "deadline")

    timeouts.sweep()

    run = Run.objects.get(pk=gate.run_id)
    assert run.status == Run.Status.FAILED
    failed = Event.objects.get(run=run, type=Event.Type.FAILED)
    assert "nobody reviewed it" in failed.payload["error"]
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.EXPIRED


def test_a_gate_without_a_deadline_is_left_alone(facts):
    gate = waiting_review({})

    assert timeouts.sweep() == []
    assert Run.objects.get(pk=gate.run_id).status == Run.Status.WAITING


def test_an_escalation_is_announced_once_to_its_role(facts, settings):
    settings.RESUMER_NOTIFY_EMAILS = ["team@example.com"]
    gate = waiting_review({}, escalate_to="supervisor")
    # The message that told of the gate opening went out (its window closed).
    assert NotificationRun.objects.get(run_id=gate.run_id).reason == "waiting"
    Notification.objects.update(state=Notification.State.QUEUED)
    past(gate, "escalate_at")

    timeouts.sweep()
    timeouts.sweep()

    assert Gate.objects.get(pk=gate.pk).escalated
    reasons = sorted(
        NotificationRun.objects.filter(run_id=gate.run_id).values_list("reason", flat=True)
    )
    assert reasons == ["escalated_to_supervisor", "waiting"]


# --- A time-out is not a vote ---------------------------------------------------------------

DEFAULT = {"decision": "approve", "title": "T", "body": "B"}


def waiting_for_two() -> Gate:
    gate = waiting_review({"answer": DEFAULT})
    Gate.objects.filter(pk=gate.pk).update(quorum=2)
    return Gate.objects.get(pk=gate.pk)


def answers_of(gate: Gate) -> list[Event]:
    return list(
        Event.objects.filter(run_id=gate.run_id, type=Event.Type.HUMAN_ANSWERED).order_by("seq")
    )


def test_a_quorum_gate_without_votes_takes_its_default_answer_at_the_deadline(facts, redis_conn):
    gate = waiting_for_two()
    past(gate, "deadline")

    assert timeouts.sweep() == [gate.pk]

    gate.refresh_from_db()
    assert (gate.status, gate.answered_by, gate.answer) == (
        GateStatus.ANSWERED,
        answers.TIME_OUT,
        DEFAULT,
    )
    assert gate.votes == []
    [event] = answers_of(gate)
    assert event.payload["final"] and event.payload["timed_out"]
    run = Run.objects.get(pk=gate.run_id)
    assert run.status == Run.Status.RUNNING and run.ticket


def test_a_quorum_gate_with_one_vote_that_differs_takes_its_default_answer_at_the_deadline(
    facts, redis_conn
):
    gate = waiting_for_two()
    ana = User.objects.create_user("ana").pk
    answers.answer(
        gate.pk, {**DEFAULT, "title": "Ana's"}, actor="user:ana", roles={"operator"}, user=ana
    )
    past(gate, "deadline")

    assert timeouts.sweep() == [gate.pk]

    gate.refresh_from_db()
    assert (gate.status, gate.answered_by, gate.answer) == (
        GateStatus.ANSWERED,
        answers.TIME_OUT,
        DEFAULT,
    )
    assert [v["by"] for v in gate.votes] == ["user:ana"]
    assert [(e.payload["by"], e.payload["final"]) for e in answers_of(gate)] == [
        ("user:ana", False),
        (answers.TIME_OUT, True),
    ]


def test_after_the_time_outs_answer_a_single_vote_is_refused(facts, redis_conn):
    gate = waiting_for_two()
    past(gate, "deadline")
    timeouts.sweep()
    bob = User.objects.create_user("bob").pk

    with pytest.raises(answers.AlreadyAnswered, match="already answered by time-out"):
        answers.answer(gate.pk, DEFAULT, actor="user:bob", roles={"operator"}, user=bob)

    assert [e.payload["by"] for e in answers_of(gate)] == [answers.TIME_OUT]
    assert Gate.objects.get(pk=gate.pk).votes == []


def test_a_late_answer_is_refused_and_the_next_sweep_applies_the_time_out(facts):
    gate = waiting_review({"fail": True, "reason": "nobody reviewed it"})
    past(gate, "deadline")
    with pytest.raises(answers.DeadlinePassed):
        answers.answer(gate.pk, dict(gate.initial), actor="ana", roles={"operator"})

    timeouts.sweep()

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.EXPIRED
    assert Run.objects.get(pk=gate.run_id).status == Run.Status.FAILED
    assert answers_of(gate) == []


def test_an_overdue_gate_is_logged_once_with_how_late_it_was(facts, redis_conn, caplog):
    gate = waiting_for_two()
    past(gate, "deadline")

    with caplog.at_level(logging.WARNING, logger="runs.gates"):
        timeouts.sweep()
        timeouts.sweep()

    lines = [r.getMessage() for r in caplog.records if r.name == "runs.gates"]
    assert len(lines) == 1
    assert f"gate publish/review of run-{gate.run_id} was open" in lines[0]
    assert "s past its deadline, with 0 of 2 votes" in lines[0]

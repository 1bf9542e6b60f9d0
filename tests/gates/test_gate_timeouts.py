"""The sweeper's step for gates (runs/gates/timeouts.py), run in this process: a deadline
applies on_timeout, an escalation is announced once. Deadlines are moved into the past with
an update instead of waiting for them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models.functions import Now

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.gates import timeouts
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

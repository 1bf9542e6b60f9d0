"""A finished run that departed from its plan is acknowledged with a reason, and leaves the
runs that need a human (runs/planning/acknowledge.py)."""

from __future__ import annotations

import pytest

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.models import Event, Run
from runs.planning.acknowledge import AcknowledgeRefused, acknowledge
from tests.support.plans import finished_deviated

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_acknowledged_deviation_is_an_event_and_the_run_leaves_the_inbox(facts):
    run = finished_deviated()

    event = acknowledge(run.pk, "the second render was a retry we expected", actor="user:ana")

    run.refresh_from_db()
    assert (run.deviated, run.attention, run.status) == (False, 2, Run.Status.SUCCEEDED)
    assert event.type == Event.Type.ACKNOWLEDGED and event.actor == "user:ana"
    assert event.payload["reason"] == "the second render was a retry we expected"
    assert event.payload["deviation_seq"] == event.seq - 1


@pytest.mark.parametrize("reason", ["", "   ", "x" * 2001])
def test_an_acknowledgement_needs_a_reason_of_sensible_length(facts, reason):
    run = finished_deviated()
    seq = run.last_seq

    with pytest.raises(AcknowledgeRefused):
        acknowledge(run.pk, reason, actor="user:ana")

    run.refresh_from_db()
    assert (run.deviated, run.last_seq) == (True, seq)


def test_a_run_without_a_deviation_is_not_acknowledged(facts):
    run = run_inline(engine.start_run("content", {}, actor="test", enqueue=False).pk)

    with pytest.raises(AcknowledgeRefused, match="no deviation"):
        acknowledge(run.pk, "fine", actor="user:ana")

    assert not Event.objects.filter(run=run, type=Event.Type.ACKNOWLEDGED).exists()


def test_acknowledging_an_unknown_run_is_refused_and_writes_nothing():
    before = Event.objects.count()

    with pytest.raises(AcknowledgeRefused, match="there is no run 987654"):
        acknowledge(987654, "the second render was a retry we expected", actor="user:ana")

    assert Event.objects.count() == before

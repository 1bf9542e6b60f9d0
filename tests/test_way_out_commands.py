"""`manage.py close_run` and `manage.py ask_again`: each calls the domain function the run
page calls; bad input (an unknown run, no reason, a run that is not stopped, nothing to ask
again) is a CommandError and changes nothing."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from runs import engine
from runs.models import Event, Gate, GateStatus, Run
from tests.gates import pipelines as gp
from tests.support.pipelines import registered
from tests.support.refusals import refused_charge, sent_back_review, unknown_charge, waiting_charge

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def gate_pipelines(settings, demo_service, redis_conn):
    with registered(settings, *gp.PATHS):
        yield


def command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_close_run_closes_a_stopped_run_out_and_says_what_stays_unsettled():
    run = unknown_charge()

    out = command("close_run", run.public_id, "--reason", "the charge is checked by hand")

    run.refresh_from_db()
    assert run.status == Run.Status.CLOSED
    event = Event.objects.get(run=run, type=Event.Type.CLOSED_OUT)
    assert (event.actor, event.payload["reason"]) == ("user:cli", "the charge is checked by hand")
    assert f"{run.public_id} closed out (event #{event.seq})" in out
    assert "charge_card (pay/fee) is unknown" in out


@pytest.mark.parametrize("reason", ["", "   "])
def test_close_run_without_a_reason_is_refused(reason):
    run = refused_charge()

    with pytest.raises(CommandError, match="say why"):
        command("close_run", run.public_id, "--reason", reason)

    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED


def test_close_run_of_a_running_or_unknown_run_is_refused():
    pending = engine.start_run("gate-charge", {}, actor="test", enqueue=False)

    with pytest.raises(CommandError, match="is pending: its stage job is queued or due"):
        command("close_run", pending.public_id, "--reason", "stop")
    with pytest.raises(CommandError, match="unknown run"):
        command("close_run", "run-987654", "--reason", "gone")

    assert not Event.objects.filter(type=Event.Type.CLOSED_OUT).exists()


def test_ask_again_reopens_the_refused_confirmation():
    run = refused_charge()

    out = command("ask_again", run.public_id, "--actor", "ana")

    gate = Gate.objects.get(run=run, gate_id="fee")
    assert gate.status == GateStatus.OPEN and gate.attempts[0]["asked_by"] == "user:ana"
    assert f"{run.public_id} waits at pay/fee (gate {gate.pk})" in out


def test_ask_again_where_nothing_was_refused_is_refused():
    gate = waiting_charge()

    with pytest.raises(CommandError, match="nothing was asked"):
        command("ask_again", f"run-{gate.run_id}")

    assert not Event.objects.filter(type=Event.Type.GATE_REOPENED).exists()


def test_ask_again_reopens_a_sent_back_review_and_says_so(facts):
    run = sent_back_review(notes="too short")
    gate = Gate.objects.get(run=run, gate_id="review")

    out = command("ask_again", run.public_id)

    assert (
        f"waits at publish/review (gate {gate.pk}), asked again after attempt 1 sent the work back"
        in out
    )
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN

"""Closing a stopped run out with a reason (runs/planning/close_out.py): its own status and
event in the chain, out of the inbox, never resumed, its open gates closed; what it did not
settle outside stays unsettled. Runs that are not stopped, and reasons that are missing or too
long, are refused with nothing written."""

from __future__ import annotations

import pytest

from runs import engine
from runs.gates import answers
from runs.gates.acts import TICK
from runs.ledger.verify import verify_chain
from runs.models import Effect, Event, GateStatus, Run
from runs.planning.close_out import CloseRefused, InvalidReason, close_out
from runs.planning.planner import compute_plan
from runs.planning.resume import ResumeRefused, approve
from runs.reads.inbox import InboxFilters, inbox_page, reason_counts
from tests.gates import pipelines as gp
from tests.support.pipelines import registered
from tests.support.refusals import (
    SUPERVISOR,
    confirm,
    refused_charge,
    unknown_charge,
    waiting_charge,
)

pytestmark = pytest.mark.django_db(transaction=True)

REASON = "the customer cancelled the promotion"


@pytest.fixture(autouse=True)
def gate_pipelines(settings, demo_service, redis_conn):
    with registered(settings, *gp.PATHS):
        yield


def test_a_closed_out_run_has_its_status_and_event_and_leaves_the_inbox():
    run = refused_charge()
    assert reason_counts()["total"] == 1

    event = close_out(run.pk, f"  {REASON} ", actor="user:ana")

    run.refresh_from_db()
    assert (run.status, run.attention, run.severity) == (Run.Status.CLOSED, 2, 0)
    assert (event.type, event.actor, event.seq) == (Event.Type.CLOSED_OUT, "user:ana", run.last_seq)
    assert event.payload["reason"] == REASON
    assert event.payload["previous_status"] == Run.Status.FAILED
    assert reason_counts()["total"] == 0
    assert inbox_page(InboxFilters(), None).needs_human == 0
    assert verify_chain(run.pk).ok


def test_a_closed_run_is_not_resumable():
    run = refused_charge()
    close_out(run.pk, REASON, actor="user:ana")

    plan = compute_plan(run)

    assert not plan.resumable and "closed out" in plan.not_resumable_reason
    with pytest.raises(ResumeRefused):
        approve(run, "strict", plan.fingerprint, actor="user:ana")
    assert Run.objects.get(pk=run.pk).status == Run.Status.CLOSED


def test_closing_settles_nothing_and_lists_what_stays_unsettled():
    run = unknown_charge()

    event = close_out(run.pk, REASON, actor="user:ana")

    effect = Effect.objects.get(run=run, call_id="fee")
    assert effect.status == Effect.Status.UNKNOWN
    assert event.payload["unsettled"] == [
        {"call": "pay/fee", "tool": "charge_card", "status": "unknown", "key": effect.delivery_key}
    ]
    assert verify_chain(run.pk).ok


def test_a_waiting_run_is_closed_with_its_gate_which_nobody_may_answer_then():
    gate = waiting_charge()

    event = close_out(gate.run_id, REASON, actor="user:ana")

    gate.refresh_from_db()
    assert (gate.status, gate.answer_seq) == (GateStatus.CLOSED, event.seq)
    assert event.payload["gates_closed"] == ["pay/fee"]
    with pytest.raises(answers.AnswerRefused, match="no longer waiting"):
        answers.answer(gate.pk, {"decision": "approve", TICK: "on"}, actor="sam", roles=SUPERVISOR)
    assert not Event.objects.filter(run_id=gate.run_id, type=Event.Type.HUMAN_ANSWERED).exists()
    assert Run.objects.get(pk=gate.run_id).status == Run.Status.CLOSED


@pytest.mark.parametrize("reason", ["", "   ", "x" * 2001])
def test_a_close_out_needs_a_reason_of_sensible_length(reason):
    run = refused_charge()
    seq = run.last_seq

    with pytest.raises(InvalidReason):
        close_out(run.pk, reason, actor="user:ana")

    run.refresh_from_db()
    assert (run.status, run.last_seq) == (Run.Status.FAILED, seq)


def test_a_run_that_is_not_stopped_is_not_closed():
    pending = engine.start_run("gate-charge", {}, actor="test", enqueue=False)
    succeeded = confirm(waiting_charge())
    assert succeeded.status == Run.Status.SUCCEEDED

    with pytest.raises(CloseRefused, match="is pending: its stage job is queued or due"):
        close_out(pending.pk, REASON, actor="user:ana")
    with pytest.raises(CloseRefused, match="nothing to close"):
        close_out(succeeded.pk, REASON, actor="user:ana")

    assert not Event.objects.filter(type=Event.Type.CLOSED_OUT).exists()


def test_a_finished_run_is_said_to_have_succeeded_not_to_be_succeeded():
    succeeded = confirm(waiting_charge())

    with pytest.raises(CloseRefused) as refused:
        close_out(succeeded.pk, REASON, actor="user:ana")

    assert str(refused.value).startswith(f"{succeeded.public_id} has succeeded: ")


def test_a_run_is_closed_out_once():
    run = refused_charge()
    close_out(run.pk, REASON, actor="user:ana")

    with pytest.raises(CloseRefused, match="closed out already"):
        close_out(run.pk, "again", actor="user:bo")

    assert Event.objects.filter(run=run, type=Event.Type.CLOSED_OUT).count() == 1


def test_an_unknown_run_is_refused():
    with pytest.raises(CloseRefused, match="there is no run"):
        close_out(987654, REASON, actor="user:ana")

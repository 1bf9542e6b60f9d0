"""Answering a gate in this process (runs/gates/answers.py): the form decides what is an
answer, the role who may give it, and a refused answer writes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db.models.functions import Now

from demo.management.commands.seed_demo import run_inline
from demo.simulators import ensure_topic
from runs import engine
from runs.gates import answers
from runs.gates.acts import TICK
from runs.gates.decision import gate_digest
from runs.gates.shared import shared
from runs.models import Event, Gate, GateStatus, Run
from tests.gates import pipelines as gp
from tests.support.pipelines import registered

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = frozenset({"operator"})
SUPERVISOR = frozenset({"supervisor"})
VIEWER = frozenset({"viewer"})


def waiting_at_review(topic: str = "") -> Gate:
    if topic:
        ensure_topic(topic)
    inputs = {"review": "on"} | ({"topic": topic} if topic else {})
    run = engine.start_run("content", inputs, actor="test", enqueue=False)
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

    with pytest.raises(answers.NotAllowed, match="this gate is for an operator to answer"):
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


# --- The tick that names the act ------------------------------------------------------------


def test_approving_a_charge_without_the_tick_is_a_form_error_and_writes_nothing(facts, redis_conn):
    gate = waiting_at_charge()

    with pytest.raises(answers.InvalidAnswer) as refused:
        answers.answer(gate.pk, {"decision": "approve"}, actor="sam", roles=SUPERVISOR)

    [error] = refused.value.form.errors[TICK]
    assert "charges $5.00 to acct-42 (card)" in error
    assert answered_events(gate) == 1  # the review's, before
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


def test_approving_a_charge_with_the_tick_is_recorded(facts, redis_conn):
    gate = waiting_at_charge()

    answers.answer(gate.pk, {"decision": "approve", TICK: "on"}, actor="sam", roles=SUPERVISOR)

    gate.refresh_from_db()
    assert (gate.status, gate.answer["decision"]) == (GateStatus.ANSWERED, "approve")
    assert TICK not in gate.answer  # the tick is how it was given, not what was answered


# --- The digest of what was shown -----------------------------------------------------------


def test_an_answer_with_a_stale_digest_is_refused_with_the_fresh_one_and_writes_nothing(facts):
    gate = waiting_at_review()
    before = Run.objects.get(pk=gate.run_id).last_seq

    with pytest.raises(answers.StaleAnswer) as refused:
        answers.answer(gate.pk, dict(gate.initial), actor="ana", roles=OPERATOR, digest="0" * 64)

    assert refused.value.digest == gate_digest(gate)
    assert "what you were shown changed" in str(refused.value)
    assert Run.objects.get(pk=gate.run_id).last_seq == before
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


def test_an_answer_with_the_gates_digest_is_recorded(facts, redis_conn):
    gate = waiting_at_review()

    answers.answer(
        gate.pk, dict(gate.initial), actor="ana", roles=OPERATOR, digest=gate_digest(gate)
    )

    assert Gate.objects.get(pk=gate.pk).status == GateStatus.ANSWERED


def test_the_digest_changes_when_the_gate_shows_another_opening(facts):
    gate = waiting_at_review()
    shown = gate_digest(gate)

    gate.seq += 1  # what a re-opened gate's GATE_OPENED gives it

    assert gate_digest(gate) != shown


# --- Bulk gives only what the gates share ---------------------------------------------------


def test_bulk_review_offers_only_the_fields_every_run_shows_alike(facts):
    gates = [waiting_at_review("gates"), waiting_at_review("leases")]

    common = shared(gates)

    assert common.differ == ["Title", "Body"]
    assert common.names == ["decision", "notes"]
    assert common.initial["decision"] == "approve"


def test_a_bulk_answer_that_gives_a_field_the_runs_do_not_share_writes_nothing(facts):
    gates = [waiting_at_review("gates"), waiting_at_review("leases")]

    with pytest.raises(answers.InvalidAnswer, match="body differ from run to run"):
        answers.answer_many(
            [g.pk for g in gates],
            {"decision": "approve", "body": "one body for all"},
            shape=gates[0].shape,
            actor="ana",
            roles=OPERATOR,
        )

    assert sum(answered_events(g) for g in gates) == 0


def test_a_bulk_answer_skips_a_gate_whose_digest_is_stale(facts, redis_conn):
    first, second = waiting_at_review(), waiting_at_review()

    result = answers.answer_many(
        [first.pk, second.pk],
        {"decision": "approve"},
        shape=first.shape,
        actor="ana",
        roles=OPERATOR,
        digests={first.pk: gate_digest(first), second.pk: "stale"},
    )

    assert [a.gate.pk for a in result.answered] == [first.pk]
    assert [pk for pk, _ in result.skipped] == [second.pk]
    assert answered_events(second) == 0


# --- What the reviewer reads ----------------------------------------------------------------


@pytest.fixture
def gate_pipelines(settings):
    with registered(settings, *gp.PATHS):
        yield


def test_details_are_recorded_with_the_gate_and_its_opening_event(gate_pipelines):
    run = run_inline(engine.start_run("gate-detailed", {}, actor="test", enqueue=False).pk)

    gate = Gate.objects.get(run=run, gate_id="reply")
    assert gate.details == gp.EMAIL
    opened = Event.objects.get(run=run, type=Event.Type.GATE_OPENED)
    assert opened.payload["details"] == gp.EMAIL


def test_a_question_too_long_for_a_heading_fails_the_stage_and_says_where_it_goes(
    gate_pipelines,
):
    run = run_inline(engine.start_run("gate-long-question", {}, actor="test", enqueue=False).pk)

    assert run.status == Run.Status.FAILED
    failed = Event.objects.get(run=run, type=Event.Type.FAILED)
    assert "put long text in details=" in failed.payload["error"]
    assert not Gate.objects.filter(run=run).exists()


def test_a_confirmations_description_is_recorded_as_its_details(facts, redis_conn):
    gate = waiting_at_charge()

    assert "**The promotion fee**" in gate.details

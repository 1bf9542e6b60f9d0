"""A run whose review was answered "request changes" and whose stage failed on it: a strict
resume would reuse the answer and fail the same way, so its plan offers none and says why
(runs/gates/sent_back.py), instead of promising to publish and charge. Ask again reopens the
review (runs/gates/reopen.py): the reviewer answers anew and the stage reads that answer."""

from __future__ import annotations

import pytest
from django import forms

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.gates import answers
from runs.gates.reopen import AskAgainRefused, ask_again
from runs.models import ApprovalMode, Event, Gate, GateStatus, ReplayPolicy, Run
from runs.pipeline import Call, Pipeline, Stage, StageOutput, Tool
from runs.planning.planner import compute_plan
from runs.planning.resume import ResumeRefused, approve
from tests.support.pipelines import registered
from tests.support.refusals import sent_back_review

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_stage_sent_back_by_its_reviewer_is_offered_no_resume_and_says_why(facts):
    run = sent_back_review(notes="too short")
    assert run.status == Run.Status.FAILED

    plan = compute_plan(run)

    assert not plan.resumable and not plan.upgrade.available
    assert "publish/review was answered request_changes by user:ana" in plan.not_resumable_reason
    assert "(too short)" in plan.not_resumable_reason
    assert "a strict resume would reuse it and fail the same way" in plan.not_resumable_reason
    assert "Ask the operator again (Ask again)" in plan.not_resumable_reason


def test_approving_a_resume_of_a_sent_back_stage_is_refused_and_writes_nothing(facts):
    run = sent_back_review(notes="too short")
    before = Run.objects.get(pk=run.pk).last_seq

    with pytest.raises(ResumeRefused, match="fail the same way"):
        approve(run, ApprovalMode.STRICT, compute_plan(run).fingerprint, actor="user:op")

    assert Run.objects.get(pk=run.pk).last_seq == before
    assert not Event.objects.filter(run=run, type=Event.Type.PLAN_APPROVED).exists()


class Check(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Go"), ("request_changes", "Redo")])


def _redraft(ctx) -> StageOutput:
    answer = ctx.ask("check", "Go on?", form=Check, initial={"decision": "approve"})
    if answer["decision"] != "approve":
        ctx.call("redraft-1", "redraft")  # the stage acts on the answer: a new call
        raise RuntimeError("the redraft did not pass its own check")
    return StageOutput(outputs={})


redrafts = Pipeline(
    name="sent-back-redraft",
    tools=(Tool("redraft", ReplayPolicy.SAFE, call=lambda args, key: {"ok": True}),),
    stages=(Stage("write", _redraft, tools=("redraft",), calls=(Call("redraft-1", "redraft"),)),),
)


def redrafted() -> tuple[Run, Gate]:
    """A sent-back-redraft run (registered by the caller) whose check was answered "request
    changes", and whose stage made a call on that answer before it failed."""
    run = run_inline(engine.start_run("sent-back-redraft", {}, actor="t", enqueue=False).pk)
    gate = Gate.objects.get(run=run, gate_id="check")
    answers.answer(gate.pk, {"decision": "request_changes"}, actor="user:ana", roles={"operator"})
    return run_inline(run.pk), gate


def test_a_stage_that_acted_on_the_answer_before_it_failed_is_resumable(settings):
    # It made a call after reading "request changes": its failure is its own, not the answer's.
    with registered(settings, "tests.planning.test_sent_back.redrafts"):
        run, _ = redrafted()
        assert run.status == Run.Status.FAILED

        plan = compute_plan(run)

    assert plan.resumable and plan.not_resumable_reason == ""


def test_ask_again_reopens_a_sent_back_review_with_its_answer_and_the_run_waits(facts):
    run = sent_back_review(notes="too short")
    before = Gate.objects.get(run=run, gate_id="review")

    gate = ask_again(run.pk, actor="user:op")

    assert gate.pk == before.pk and gate.status == GateStatus.OPEN and gate.answer is None
    (attempt,) = gate.attempts
    assert attempt["sent_back"] is True and "key" not in attempt
    assert (attempt["answer"]["decision"], attempt["answer"]["notes"]) == (
        "request_changes",
        "too short",
    )
    assert (attempt["by"], attempt["asked_by"]) == ("user:ana", "user:op")
    assert Run.objects.get(pk=run.pk).status == Run.Status.WAITING
    reopened = Event.objects.get(run=run, type=Event.Type.GATE_REOPENED)
    assert reopened.payload["refused"]["sent_back"] is True and reopened.actor == "user:op"


def test_the_new_answer_is_the_one_the_stage_reads(facts, demo_service):
    run = sent_back_review(notes="too short")
    gate = ask_again(run.pk, actor="user:op")
    edited = {**gate.initial, "decision": "approve", "title": "Longer, and approved"}

    answers.answer(gate.pk, edited, actor="user:ana", roles={"operator"})
    run = run_inline(run.pk)

    # Publish went on with the edited title, and the run waits at its next gate (the charge).
    assert run.status == Run.Status.WAITING
    assert Gate.objects.filter(run=run, gate_id="promote-charge").exists()
    assert [a["title"] for a in demo_service.articles()] == ["Longer, and approved"]


def test_a_stage_that_failed_on_its_own_account_has_no_question_to_ask_again(settings):
    # It made a call after reading "request changes": its plan offers a resume instead.
    with registered(settings, "tests.planning.test_sent_back.redrafts"):
        run, gate = redrafted()
        before = Run.objects.get(pk=run.pk).last_seq

        with pytest.raises(AskAgainRefused, match="nor a question whose answer sent its stage"):
            ask_again(run.pk, actor="user:op")

    assert Run.objects.get(pk=run.pk).last_seq == before
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.ANSWERED

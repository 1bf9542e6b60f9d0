"""A run whose review was answered "request changes" and whose stage failed on it: a strict
resume would reuse the answer and fail the same way, so its plan offers none and says why
(runs/planning/sent_back.py), instead of promising to publish and charge."""

from __future__ import annotations

import pytest
from django import forms

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.gates import answers
from runs.models import ApprovalMode, Event, Gate, ReplayPolicy, Run
from runs.pipeline import Call, Pipeline, Stage, StageOutput, Tool
from runs.planning.planner import compute_plan
from runs.planning.resume import ResumeRefused, approve
from tests.support.pipelines import registered

pytestmark = pytest.mark.django_db(transaction=True)


def reviewed(decision: str, notes: str = "") -> Run:
    """The demo's content run with review on, its review answered `decision`, run on."""
    run = run_inline(engine.start_run("content", {"review": "on"}, actor="t", enqueue=False).pk)
    gate = Gate.objects.get(run=run, gate_id="review")
    answer = {**gate.initial, "decision": decision, "notes": notes}
    answers.answer(gate.pk, answer, actor="user:ana", roles={"operator"})
    return run_inline(run.pk)


def test_a_stage_sent_back_by_its_reviewer_is_offered_no_resume_and_says_why(facts):
    run = reviewed("request_changes", notes="too short")
    assert run.status == Run.Status.FAILED

    plan = compute_plan(run)

    assert not plan.resumable and not plan.upgrade.available
    assert "publish/review was answered request_changes by user:ana" in plan.not_resumable_reason
    assert "(too short)" in plan.not_resumable_reason
    assert "a strict resume would reuse it and fail the same way" in plan.not_resumable_reason


def test_approving_a_resume_of_a_sent_back_stage_is_refused_and_writes_nothing(facts):
    run = reviewed("request_changes", notes="too short")
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


def test_a_stage_that_acted_on_the_answer_before_it_failed_is_resumable(settings):
    # It made a call after reading "request changes": its failure is its own, not the answer's.
    with registered(settings, "tests.planning.test_sent_back.redrafts"):
        run = run_inline(engine.start_run("sent-back-redraft", {}, actor="t", enqueue=False).pk)
        gate = Gate.objects.get(run=run, gate_id="check")
        answers.answer(
            gate.pk, {"decision": "request_changes"}, actor="user:ana", roles={"operator"}
        )
        run = run_inline(run.pk)
        assert run.status == Run.Status.FAILED

        plan = compute_plan(run)

    assert plan.resumable and plan.not_resumable_reason == ""

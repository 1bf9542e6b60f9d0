"""Plans and the contract know gates: a worker that died right after an answer leaves a plan
that says the answer is recorded, and the strict resume never asks again. The worker is a
forked child that the demo's fault kills (seed_demo.run_until_killed), as in seed_demo."""

from __future__ import annotations

import signal

import pytest

from demo import faults
from demo.management.commands.seed_demo import interrupt_killed, run_inline, run_until_killed
from runs.gates import answers
from runs.gates.acts import TICK
from runs.gates.decision import GateAction
from runs.models import ApprovalMode, Event, Gate, Run
from runs.planning.planner import compute_plan
from runs.planning.resume import approve

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = frozenset({"operator"})
SUPERVISOR = frozenset({"supervisor"})


def opened(run: Run, gate_id: str) -> int:
    return Event.objects.filter(run=run, type=Event.Type.GATE_OPENED, payload__gate=gate_id).count()


def killed_after_the_review_was_answered() -> Run:
    run = faults.start_run(
        "content",
        {"review": "on"},
        actor="test",
        faults={"crash": "publish/review/after-answer"},
        enqueue=False,
    )
    run_inline(run.pk)
    review = Gate.objects.get(run=run, gate_id="review")
    answers.answer(review.pk, dict(review.initial), actor="ana", roles=OPERATOR)
    exitcode = run_until_killed(run.pk)
    assert exitcode == -signal.SIGKILL
    return interrupt_killed(run, exitcode, "right after the review's answer")


def test_the_plan_says_the_recorded_answer_is_not_asked_again(facts, redis_conn):
    run = killed_after_the_review_was_answered()

    plan = compute_plan(run)

    line = next(g for g in plan.gates if g.gate_id == "review")
    assert line.action == GateAction.USE_ANSWER
    assert "answer recorded (answered approve by ana at" in line.said
    assert line.said.endswith("not asked again")
    charge = next(g for g in plan.gates if g.gate_id == "promote-charge")
    assert (charge.action, charge.role) == (GateAction.ASK, "supervisor")


def test_a_strict_resume_never_asks_an_answered_gate_again_and_keeps_its_plan(
    facts, demo_service, redis_conn
):
    run = killed_after_the_review_was_answered()
    approve(run, ApprovalMode.STRICT, compute_plan(run).fingerprint, actor="op")

    run = run_inline(run.pk)
    assert run.status == Run.Status.WAITING  # at the charge, which nobody was asked yet
    charge = Gate.objects.get(run=run, gate_id="promote-charge")
    answers.answer(charge.pk, {"decision": "approve", TICK: "on"}, actor="sam", roles=SUPERVISOR)
    run = run_inline(run.pk)

    assert run.status == Run.Status.SUCCEEDED
    assert (opened(run, "review"), opened(run, "promote-charge")) == (1, 1)
    assert len(demo_service.articles()) == 1 and len(demo_service.charges()) == 1
    kept = Event.objects.get(run=run, type=Event.Type.PLAN_KEPT)
    assert kept.payload["gates"] == {"asked": 1, "promised": 1}
    assert not Event.objects.filter(run=run, type=Event.Type.PLAN_DEVIATED).exists()

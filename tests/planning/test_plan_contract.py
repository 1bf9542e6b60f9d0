"""The approved plan is a contract: the engine decides each call with the planner's own
function, holds it against the plan's line, and ends resumed work with a verdict.

Every case of the crash matrix proves PLAN_KEPT with exact calls, target requests and money
(tests/faults/matrix.py, invariant "plan-kept"). Here the world changes between the approval
and the work, and the verdict must say so without an unplanned RECONCILE_FIRST or NEVER call.
"""

from __future__ import annotations

import signal

import pytest

from demo import faults
from demo import simulators as sim
from runs import engine
from runs.ledger.maintenance import maintenance
from runs.models import ApprovalMode, Effect, Event, Run
from runs.pipeline import Reconciliation
from runs.planning import contract, replay
from runs.planning.planner import compute_plan
from runs.planning.replay import Action, Recorded
from runs.planning.resume import StalePlan, approve
from tests.support.plans import effect, event_types, ledger_state
from tests.support.processes import Workers, wait_for
from tests.support.state import run_status


def interrupted_without_workers(workers: Workers, crash: str) -> Run:
    """A run whose worker died at `crash`, interrupted by a sweeper, and no worker left: what
    happens between the approval and the resumed work is then up to the test."""
    run = faults.start_run("content", {}, actor="test", faults={"crash": crash})
    doomed = workers.start()
    doomed.wait(timeout=120)
    assert doomed.returncode == -signal.SIGKILL
    workers.start()
    wait_for(lambda: run_status(run) == Run.Status.INTERRUPTED, what="interrupted")
    workers.stop_all()
    run.refresh_from_db()
    return run


def publish_calls_since(mark: int) -> int:
    """Publish requests the platform received after meter row `mark` (answered or not)."""
    return world().count("publish", outcome=None, after=mark)


def top_meter() -> int:
    return world().marks()["meter"]


def world():
    from django.conf import settings

    from demo_service.process import ServiceClient

    return ServiceClient(settings.DEMO_SERVICE_URL)


def verdicts(run: Run) -> list[str]:
    return [t for t in event_types(run) if t in (Event.Type.PLAN_KEPT, Event.Type.PLAN_DEVIATED)]


def land_late(run: Run, *, title: str | None = None) -> None:
    """The first attempt's publish request reaches the platform after all (a slow network):
    the article appears under the effect's delivery key, with the same or another title."""
    request = effect(run, "publish").request
    world().publish(
        {
            "account": request["account"],
            "platform": request["platform"],
            "title": title or request["title"],
            "body": request["body"],
            "cover_url": request["cover_url"],
            "delivery_key": effect(run, "publish").delivery_key,
        }
    )


def test_an_article_that_lands_after_the_approval_deviates_the_plan_and_is_not_published_again(
    workers,
):
    run = interrupted_without_workers(workers, "publish/publish/before")
    plan = compute_plan(run)
    line = next(e for e in plan.effects if e.call_id == "publish")
    assert (line.action, line.queries) == (Action.CALL, 1)

    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    land_late(run)
    mark = top_meter()
    workers.start()
    wait_for(lambda: run_status(run) not in Run.ACTIVE, what="the resumed work to end")

    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert verdicts(run) == [Event.Type.PLAN_DEVIATED]
    deviated = Event.objects.get(run=run, type=Event.Type.PLAN_DEVIATED)
    assert deviated.payload["difference"]["planned"] == Action.CALL
    assert deviated.payload["difference"]["actual"] == Action.RECORD_FOUND
    # Recorded from the target, never published a second time.
    assert publish_calls_since(mark) == 0
    assert effect(run, "publish").status == Effect.Status.CONFIRMED
    # Succeeded, yet with the runs that need a human: it did not do what was approved.
    assert (run.deviated, run.attention) == (True, 0)


def test_a_different_article_after_the_approval_stops_the_run_before_any_publish_or_charge(
    workers,
):
    run = interrupted_without_workers(workers, "publish/publish/before")
    plan = compute_plan(run)
    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    land_late(run, title="Someone else's title")
    mark = top_meter()
    workers.start()
    wait_for(lambda: run_status(run) not in Run.ACTIVE, what="the resumed work to stop")

    run.refresh_from_db()
    assert run.status == Run.Status.NEEDS_APPROVAL
    assert verdicts(run) == [Event.Type.PLAN_DEVIATED]
    assert publish_calls_since(mark) == 0
    assert world().count("charge", outcome=None, after=mark) == 0
    assert not Effect.objects.filter(run=run, call_id="promote-charge").exists()


def test_an_unpromised_call_on_a_reconcile_first_tool_is_not_made(in_process_run):
    """The plan promised to reuse the confirmed article; if the ledger row says otherwise by
    the time the engine gets there (changed behind the ledger's back), the engine would call
    the platform. It stops for a human before the call instead."""
    run = in_process_run
    plan = compute_plan(run)
    assert next(e for e in plan.effects if e.call_id == "publish").action == Action.REUSE
    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    with maintenance():  # behind the ledger's back: its triggers lifted
        Effect.objects.filter(run=run, call_id="publish").update(status=Effect.Status.FAILED)
    mark = top_meter()

    run.refresh_from_db()
    engine.execute(run.pk, run.current_stage, run.ticket, holder="test:in-process")

    run.refresh_from_db()
    assert run.status == Run.Status.NEEDS_APPROVAL
    assert publish_calls_since(mark) == 0
    assert verdicts(run) == [Event.Type.PLAN_DEVIATED]
    stop = Event.objects.filter(run=run, type=Event.Type.NEEDS_APPROVAL).order_by("-seq")[0]
    assert "did not promise this call" in stop.payload["error"]


@pytest.fixture
def in_process_run(transactional_db, facts, redis_conn) -> Run:
    """A run whose promotion charge timed out (outcome unknown, run failed) and which a
    supervisor resolved as "not charged": its plan reuses the article and charges again."""
    from runs.ledger.edits import edit_effect
    from tests.support.plans import run_in_process

    run = run_in_process({"timeout": "publish/promote-charge/after"})
    assert run.status == Run.Status.FAILED
    edit_effect(
        effect(run, "promote-charge").pk,
        {"status": Effect.Status.FAILED, "error": "not charged"},
        reason="card processor shows no charge",
        actor="user:supervisor",
    )
    run.refresh_from_db()
    return run


def test_a_pinned_input_that_drifted_after_the_plan_refuses_the_approval_before_anything(
    in_process_run,
):
    run = in_process_run
    plan = compute_plan(run)
    sim.publish_facts("resumable-agents")
    before = ledger_state(run)

    with pytest.raises(StalePlan):
        approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")

    assert ledger_state(run) == before


def test_a_resume_that_does_what_was_approved_ends_with_plan_kept(in_process_run):
    run = in_process_run
    plan = compute_plan(run)
    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    run.refresh_from_db()
    engine.execute(run.pk, run.current_stage, run.ticket, holder="test:in-process")

    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert verdicts(run) == [Event.Type.PLAN_KEPT]
    kept = Event.objects.get(run=run, type=Event.Type.PLAN_KEPT)
    assert kept.payload["used"]["calls"] == {"charge_card": 1}
    assert kept.payload["used"]["money"] == plan.cost_resume.money
    assert (run.deviated, run.attention) == (False, 2)


def test_a_first_execution_is_bound_by_no_contract_and_reads_nothing_to_know_it(
    transactional_db, facts, django_assert_num_queries
):
    run = engine.start_run("content", {}, actor="test", enqueue=False)
    with django_assert_num_queries(0):
        assert contract.active(run) == (None, False)


# --- the one decision ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "status", "answer", "action"),
    [
        ("SAFE", None, None, Action.RERUN),
        ("IDEMPOTENT", None, None, Action.CALL),
        ("IDEMPOTENT", "confirmed", None, Action.REUSE),
        ("IDEMPOTENT", "intent", None, Action.RETRY_SAME_KEY),
        ("IDEMPOTENT", "abandoned", None, Action.SKIP),
        ("IDEMPOTENT", "failed", None, Action.CALL),
        ("IDEMPOTENT", "conflict", None, Action.BLOCKED),
        ("RECONCILE_FIRST", "conflict", None, Action.BLOCKED),
        ("RECONCILE_FIRST", "intent", Reconciliation(found=False), Action.CALL),
        ("RECONCILE_FIRST", "unknown", Reconciliation(found=True), Action.RECORD_FOUND),
        ("RECONCILE_FIRST", "intent", Reconciliation(found=True, matches=False), Action.BLOCKED),
        ("NEVER", "intent", None, Action.BLOCKED),
        ("NEVER", "failed", None, Action.CALL),
    ],
)
def test_decide_maps_each_recorded_state_and_policy_to_one_action(policy, status, answer, action):
    recorded = Recorded(status, "h") if status else None
    assert replay.asks_target(policy, recorded) == (answer is not None)
    decision = replay.decide(
        tool="t", call_id="c", policy=policy, recorded=recorded, request_hash="h", answer=answer
    )
    assert decision.action == action


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (Reconciliation(found=False), "not found on the target"),
        (Reconciliation(found=True, external_id="art-1"), "found on the target; record it"),
        (Reconciliation(found=True, matches=False), "found but different"),
    ],
)
def test_a_lookup_that_says_nothing_more_leaves_no_empty_brackets(answer, said):
    decision = replay.decide(
        tool="t",
        call_id="c",
        policy="RECONCILE_FIRST",
        recorded=Recorded("unknown", "h"),
        answer=answer,
    )

    assert decision.answer.startswith(said)
    assert "()" not in decision.answer + decision.reason and ": ;" not in decision.answer


def test_decide_refuses_a_key_reused_for_a_different_request():
    decision = replay.decide(
        tool="t",
        call_id="c",
        policy="IDEMPOTENT",
        recorded=Recorded("confirmed", "h1", "x-1"),
        request_hash="h2",
    )
    assert decision.action == Action.REFUSE
    assert "different request" in decision.reason


def test_decide_blocks_when_the_target_did_not_answer():
    decision = replay.decide(
        tool="publish_article",
        call_id="publish",
        policy="RECONCILE_FIRST",
        recorded=Recorded("intent", "h"),
        unanswered="platform did not answer within 5 s",
    )
    assert decision.action == Action.BLOCKED
    assert "platform did not answer within 5 s" in decision.reason

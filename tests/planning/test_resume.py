"""Approving a plan: the strict resume, what it writes and when, and every refusal.

Acceptance scenarios run on real workers and Redis; refusals and the approval event itself are
checked on runs driven in-process (tests/support/plans.py), with the database as the witness.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from rq.job import Job

from demo.simulators import publish_facts
from runs import enqueue
from runs.ledger import artifacts
from runs.ledger.edits import edit_effect
from runs.models import ApprovalMode, Checkpoint, Effect, Event, Run
from runs.planning.planner import compute_plan
from runs.planning.resume import ResumeRefused, StalePlan, approve, load_run
from tests.support.plans import (
    TOPIC,
    checkpoint,
    crashed_run,
    effect,
    failed_run,
    ledger_state,
    run_in_process,
    run_one_stage_in_process,
    tampered,
    wait_succeeded,
)

STRICT, UPGRADE = ApprovalMode.STRICT, ApprovalMode.UPGRADE


@pytest.fixture
def in_process(transactional_db, facts, redis_conn) -> None:
    """Committed rows for the engine's own threads, the demo facts, an empty queue."""


def events_of(run: Run, type_: str) -> list[Event]:
    return list(Event.objects.filter(run=run, type=type_).order_by("seq"))


# --- acceptance: strict resume on real workers ---------------------------------------------


def test_story_strict_resume_uploads_the_cover_once_under_its_recorded_key(story_run, demo_service):
    run = story_run
    cover_intent = effect(run, "upload-cover")
    body_keys = [effect(run, c).delivery_key for c in ("render-body-1", "render-body-2")]

    plan = compute_plan(run)
    assert plan.next_stage == "visual"
    assert plan.cost_resume.tool_calls < plan.cost_fresh.tool_calls
    approve(run, STRICT, plan.fingerprint, actor="user:operator")
    wait_succeeded(run)

    # The retry reused the intent's key: one effect row, attempted twice, one stored asset.
    cover = Effect.objects.get(call_id="upload-cover")
    assert cover.delivery_key == cover_intent.delivery_key
    assert (cover.status, cover.attempts) == (Effect.Status.CONFIRMED, 2)
    assert len(demo_service.assets(delivery_key=cover.delivery_key)) == 1
    # The two body images reached the renderer once each, before the crash, never again.
    for key in body_keys:
        asked = demo_service.meter("render", key)
        assert [(row["outcome"], row["count"]) for row in asked] == [("billed", 1)]
    # Three images rendered and billed in all, one article published.
    assert len(demo_service.renders()) == 3
    assert demo_service.count("render") == 3
    assert len(demo_service.articles()) == 1


def test_publish_found_on_the_platform_is_recorded_after_approval_not_published_again(
    workers, demo_service
):
    run = crashed_run(workers, {"crash": "publish/publish/after"})
    [article] = demo_service.articles()

    approve(run, STRICT, compute_plan(run).fingerprint, actor="user:operator")
    wait_succeeded(run)

    assert demo_service.articles() == [article]
    assert demo_service.count("publish", outcome=None) == 1
    [approved] = events_of(run, Event.Type.PLAN_APPROVED)
    [reconciled] = events_of(run, Event.Type.RECONCILED)
    # Written after the approval, under the lease the approval took.
    assert reconciled.seq > approved.seq
    assert (reconciled.token, reconciled.actor) == (approved.token, "user:operator")
    assert reconciled.payload["external_id"] == article["id"]
    assert effect(run, "publish").external_id == article["id"]
    assert checkpoint(run, "publish").outputs["article_id"] == article["id"]


@pytest.mark.parametrize(("how", "reason"), [("alter", "was altered"), ("delete", "is gone")])
def test_strict_resume_after_a_bad_image_reverifies_visual_without_rebilling_renders(
    workers, demo_service, how, reason
):
    run = crashed_run(workers, {"crash": "publish/publish/before"})
    visual = checkpoint(run, "visual")
    body = next(a for a in visual.artifacts if a["name"] == "image-body-1")

    with tampered(body["uri"], how):
        plan = compute_plan(run)
        assert plan.checkpoint == checkpoint(run, "draft").id
        assert reason in plan.fallbacks[0]
        approve(run, STRICT, plan.fingerprint, actor="user:operator")
        wait_succeeded(run)

    # visual ran and was verified again, from the renderer's recorded results (same keys).
    assert Checkpoint.objects.filter(run=run, stage="visual").count() == 2
    again = checkpoint(run, "visual")
    assert all(artifacts.verify(a["uri"], a["sha256"]).ok for a in again.artifacts)
    assert len(demo_service.renders()) == 3
    assert demo_service.count("render") == 3
    assert len(demo_service.articles()) == 1


def test_two_simultaneous_approvals_resume_the_run_once(workers, demo_service):
    run = run_in_process({"timeout": "publish/publish/after"})
    fingerprint = compute_plan(run).fingerprint
    start = threading.Barrier(2)
    outcomes: list[object] = []

    def operator(name: str) -> None:
        try:
            start.wait(timeout=30)
            approve(Run.objects.get(pk=run.pk), STRICT, fingerprint, actor=f"user:{name}")
            outcomes.append("resumed")
        except Exception as exc:  # recorded and asserted below, whatever it is
            outcomes.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=operator, args=(n,)) for n in ("ann", "bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert outcomes.count("resumed") == 1, outcomes
    [refused] = [o for o in outcomes if o != "resumed"]
    assert isinstance(refused, ResumeRefused), refused
    assert len(events_of(run, Event.Type.PLAN_APPROVED)) == 1
    assert len(events_of(run, Event.Type.RESUMED)) == 1
    assert len(events_of(run, Event.Type.RECONCILED)) == 1
    workers.start()
    wait_succeeded(run)
    resumed = events_of(run, Event.Type.RESUMED)[0]
    assert Event.objects.filter(run=run, type=Event.Type.STARTED, seq__gt=resumed.seq).count() == 1
    assert len(demo_service.articles()) == 1


def test_never_effect_confirmed_by_a_supervisor_resumes_without_charging_again(
    workers, demo_service
):
    run = failed_run(workers, {"timeout": "publish/promote-charge/after"})
    [charge] = demo_service.charges()  # the card was charged; the answer never arrived
    assert compute_plan(run).blocked

    edit_effect(
        effect(run, "promote-charge").pk,
        {"status": Effect.Status.CONFIRMED, "external_id": charge["id"]},
        reason="the card processor shows the charge",
        actor="user:supervisor",
    )
    plan = compute_plan(run)
    assert not plan.blocked
    approve(run, STRICT, plan.fingerprint, actor="user:operator")
    wait_succeeded(run)

    assert demo_service.charges() == [charge]
    assert checkpoint(run, "publish").outputs["charge_id"] == charge["id"]
    assert len(demo_service.articles()) == 1


# --- the approval -----------------------------------------------------------------------------


def test_strict_approval_is_an_event_with_the_user_and_the_fingerprint(in_process, redis_conn):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    plan = compute_plan(run)

    approval = approve(run, STRICT, plan.fingerprint, actor="user:operator")

    [approved] = events_of(run, Event.Type.PLAN_APPROVED)
    assert approved.actor == "user:operator"
    assert approved.payload["by"] == "user:operator"
    assert approved.payload["fingerprint"] == plan.fingerprint
    assert approved.payload["action"] == STRICT
    assert approved.payload["checkpoint"] == plan.checkpoint
    [resumed] = events_of(run, Event.Type.RESUMED)
    assert resumed.seq == approved.seq + 1
    assert resumed.payload["pinned_inputs"] == run.inputs
    run.refresh_from_db()
    assert (run.status, run.current_stage, run.attempt) == (Run.Status.RESUMING, "visual", 1)
    # The approval's answer describes the run as it now is.
    assert approval.resumed.status == Run.Status.RESUMING
    # The next stage's job is in Redis, under the run's new ticket.
    assert Job.exists(enqueue.job_id(run.pk, run.ticket), connection=redis_conn)


# --- refusals: a clear message, nothing changed ------------------------------------------------


@pytest.mark.parametrize("public_id", ["run-987654", "nonsense", ""])
def test_unknown_run_is_refused(db, public_id):
    with pytest.raises(ResumeRefused, match="unknown run"):
        load_run(public_id)


def test_running_run_is_refused(in_process):
    run = run_one_stage_in_process()
    assert run.status == Run.Status.RUNNING
    plan = compute_plan(run)
    before = ledger_state(run)

    with pytest.raises(ResumeRefused, match="still active"):
        approve(run, STRICT, plan.fingerprint, actor="user:operator")

    assert not plan.resumable
    assert ledger_state(run) == before


def test_succeeded_run_is_refused(in_process):
    run = run_in_process()
    assert run.status == Run.Status.SUCCEEDED
    plan = compute_plan(run)
    before = ledger_state(run)

    with pytest.raises(ResumeRefused, match="nothing to resume"):
        approve(run, STRICT, plan.fingerprint, actor="user:operator")

    assert ledger_state(run) == before


def test_fingerprint_of_a_plan_older_than_the_last_event_is_refused_with_the_fresh_plan(
    in_process,
):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    shown = compute_plan(run)
    # A supervisor edits the ledger after the operator read the plan: a new event.
    edit_effect(
        effect(run, "upload-cover").pk,
        {"status": Effect.Status.FAILED},
        reason="the asset store never received it",
        actor="user:supervisor",
    )
    before = ledger_state(run)

    with pytest.raises(StalePlan, match="plan changed") as refused:
        approve(run, STRICT, shown.fingerprint, actor="user:operator")

    assert refused.value.plan.fingerprint == compute_plan(run).fingerprint != shown.fingerprint
    assert ledger_state(run) == before


def test_fingerprint_of_a_plan_computed_before_new_facts_appeared_is_refused(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    shown = compute_plan(run)
    publish_facts(TOPIC)  # the drift is part of what the operator approves
    before = ledger_state(run)

    with pytest.raises(StalePlan):
        approve(run, STRICT, shown.fingerprint, actor="user:operator")

    assert ledger_state(run) == before


def test_second_approval_of_the_same_plan_is_refused(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    fingerprint = compute_plan(run).fingerprint
    approve(run, STRICT, fingerprint, actor="user:ann")
    before = ledger_state(run)

    with pytest.raises(ResumeRefused):
        approve(run, STRICT, fingerprint, actor="user:bob")

    assert ledger_state(run) == before
    assert len(events_of(run, Event.Type.RESUMED)) == 1


@pytest.mark.parametrize("forged", ["", "0" * 64, "not-a-fingerprint", "reversed"])
def test_forged_fingerprint_is_refused(in_process, forged):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    real = compute_plan(run).fingerprint
    if forged == "reversed":
        forged = real[::-1]
    before = ledger_state(run)

    with pytest.raises(StalePlan, match="fingerprint"):
        approve(run, STRICT, forged, actor="user:operator")

    assert ledger_state(run) == before


@pytest.mark.parametrize("action", [STRICT, UPGRADE])
def test_blocked_plan_is_refused(in_process, action):
    run = run_in_process({"timeout": "publish/promote-charge/after"})
    publish_facts(TOPIC)  # so that only the blocker stands in an upgrade's way
    plan = compute_plan(run)
    assert plan.upgrade.available
    before = ledger_state(run)

    with pytest.raises(ResumeRefused, match="blocked") as refused:
        approve(run, action, plan.fingerprint, actor="user:operator")

    assert "promote-charge" in str(refused.value)
    assert ledger_state(run) == before


def test_unknown_action_is_refused(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    before = ledger_state(run)

    with pytest.raises(ResumeRefused, match="strict or upgrade"):
        approve(run, "retry", compute_plan(run).fingerprint, actor="user:operator")

    assert ledger_state(run) == before

"""The reconcile plan as a value: which checkpoint, which artifacts, what each unfinished effect
gets, what it costs, and that computing it writes nothing to the ledger.

The story itself (crash at the cover upload) runs on real workers; scenarios that only need an
unfinished run with a particular ledger shape are driven in-process (tests/support/plans.py).
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.ledger.edits import edit_effect
from runs.models import Checkpoint, Effect, Event, Run
from runs.planning.planner import Action, compute_plan
from tests.support.plans import (
    change_manifest,
    checkpoint,
    crashed_run,
    effect,
    event_types,
    ledger_state,
    run_in_process,
    tampered,
)

ALL_STAGES = ["research", "draft", "visual", "prefill", "publish"]


@pytest.fixture
def in_process(transactional_db, facts, redis_conn) -> None:
    """What run_in_process needs: committed rows (the engine's heartbeat thread and the
    approvals' threads use their own connections) and the demo facts."""


def lines_by_call(plan) -> dict:
    return {line.call_id: line for line in plan.effects}


# --- the story -------------------------------------------------------------------------------


def test_story_plan_resumes_visual_reusing_both_body_images_and_retrying_the_cover_upload(
    story_run,
):
    run = story_run
    plan = compute_plan(run)

    # The crash left research's and draft's checkpoints, and visual's cover upload open.
    assert set(Checkpoint.objects.filter(run=run).values_list("stage", flat=True)) == {
        "research",
        "draft",
    }
    assert plan.checkpoint == checkpoint(run, "draft").id
    assert plan.fallbacks == []
    # The checkpoints it builds on were re-hashed: research's fact sheet and the draft.
    assert [(a.stage, a.ok) for a in plan.artifacts] == [("research", True), ("draft", True)]
    assert plan.next_stage == "visual"
    assert plan.stages_skipped == ["research", "draft"]
    assert plan.stages_reexecuted == ["visual", "prefill", "publish"]
    lines = lines_by_call(plan)
    for call in ("render-body-1", "upload-body-1", "render-body-2", "upload-body-2"):
        recorded = effect(run, call)
        assert recorded.status == Effect.Status.CONFIRMED
        assert recorded.external_id
        assert lines[call].action == Action.REUSE
        assert lines[call].external_id == recorded.external_id
    cover = effect(run, "upload-cover")
    assert (cover.status, cover.external_id) == (Effect.Status.INTENT, "")
    assert lines["upload-cover"].status == Effect.Status.INTENT
    assert lines["upload-cover"].action == Action.RETRY_SAME_KEY
    assert lines["upload-cover"].delivery_key == cover.delivery_key
    assert plan.blockers == []


def test_resume_costs_less_than_a_fresh_retry_and_rebills_nothing_done(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    plan = compute_plan(run)

    assert plan.cost_resume.tool_calls < plan.cost_fresh.tool_calls
    assert Decimal(plan.cost_resume.money) < Decimal(plan.cost_fresh.money)
    # The resume pays for the cover upload, the publish and the promotion only; a fresh retry
    # would search, draft and render all three images again.
    assert plan.cost_resume.meters == {"upload": 1, "publish": 1, "charge": 1}
    assert plan.cost_fresh.meters["render"] == 3
    assert plan.cost_fresh.meters["search"] == 1


# --- the plan is a value -----------------------------------------------------------------------


def test_plan_is_a_json_value_and_computing_it_writes_nothing(in_process):
    run = run_in_process({"timeout": "publish/publish/after"})
    before = ledger_state(run)

    plan = compute_plan(run)
    again = compute_plan(run)

    data = json.loads(json.dumps(plan.to_dict()))
    assert data == plan.to_dict()
    assert data["fingerprint"] == plan.fingerprint == again.fingerprint
    assert data["checkpoint"] == checkpoint(run, "prefill").id
    # The reconcile query found the article, but nothing is recorded before an approval.
    assert ledger_state(run) == before
    assert Event.Type.RECONCILED not in event_types(run)


def test_planner_reads_only_the_events_after_the_checkpoint(in_process):
    run = run_in_process({"timeout": "publish/publish/after"})
    chosen = checkpoint(run, "prefill")
    assert chosen.last_seq > 20  # a history worth not reading: research..prefill

    with CaptureQueriesContext(connection) as queries:
        plan = compute_plan(run)

    event_reads = [q["sql"] for q in queries.captured_queries if '"runs_event"' in q["sql"]]
    # Three reads of the log, each bounded below by the checkpoint's seq (the (run, seq)
    # index): its last events, the events of the effects the plan acts on (each row is
    # checked against them), and what the stages it runs again recorded (their replayed
    # calls); and one read of the candidate checkpoints' own VERIFIED events, each by its
    # (run, seq).
    tails = [sql for sql in event_reads if '"runs_event"."seq" >' in sql]
    assert len(tails) == 3
    assert all(f'"runs_event"."seq" > {chosen.last_seq}' in tail for tail in tails)
    [sealing] = [sql for sql in event_reads if sql not in tails]
    assert sealing.count('"runs_event"."seq" = ') == len(ALL_STAGES) - 1
    assert plan.checkpoint == chosen.id
    assert plan.tail_events == run.last_seq - chosen.last_seq


def test_without_a_checkpoint_the_plan_starts_at_the_first_stage(in_process):
    run = run_in_process({"timeout": "research/search-1/after"})
    plan = compute_plan(run)

    assert plan.checkpoint is None
    assert plan.next_stage == "research"
    assert plan.stages_skipped == []
    assert plan.stages_reexecuted == ALL_STAGES
    assert plan.tail_events == run.last_seq
    assert lines_by_call(plan)["search-1"].action == Action.RERUN


# --- artifacts ---------------------------------------------------------------------------------


def test_altered_image_invalidates_its_checkpoint_and_the_plan_falls_back_saying_why(
    in_process,
):
    run = run_in_process({"timeout": "publish/publish/after"})
    visual, prefill = checkpoint(run, "visual"), checkpoint(run, "prefill")
    cover = next(a for a in visual.artifacts if a["name"] == "image-cover")

    with tampered(cover["uri"], "alter"):
        plan = compute_plan(run)

    assert plan.checkpoint == checkpoint(run, "draft").id
    assert plan.next_stage == "visual"
    assert plan.stages_reexecuted == ["visual", "prefill", "publish"]
    assert [(a.checkpoint, a.uri) for a in plan.artifacts if not a.ok] == [
        (visual.id, cover["uri"])
    ]
    [reason] = plan.fallbacks
    assert visual.id in reason and prefill.id in reason
    assert f"{cover['uri']} was altered" in reason


def test_changed_checkpoint_manifest_makes_the_plan_fall_back_past_it_saying_why(in_process):
    run = run_in_process({"timeout": "publish/publish/after"})
    draft, visual, prefill = (checkpoint(run, s) for s in ("draft", "visual", "prefill"))
    before = compute_plan(run)
    assert before.checkpoint == prefill.id

    change_manifest(visual, outputs={**visual.outputs, "forged": True})
    plan = compute_plan(run)

    assert plan.checkpoint == draft.id
    assert plan.stages_reexecuted == ["visual", "prefill", "publish"]
    assert plan.fingerprint != before.fingerprint
    [reason] = plan.fallbacks
    assert reason.startswith(f"{visual.id} is not usable: its manifest was changed")
    assert prefill.id in reason


# --- effects -----------------------------------------------------------------------------------


def test_publish_that_reached_the_platform_is_planned_as_record_found(workers, demo_service):
    # The worker dies after the platform created the article, before its id was written.
    run = crashed_run(workers, {"crash": "publish/publish/after"})
    [article] = demo_service.articles()
    before = ledger_state(run)

    line = lines_by_call(compute_plan(run))["publish"]

    assert line.status == Effect.Status.INTENT
    assert line.action == Action.RECORD_FOUND
    assert line.external_id == article["id"]
    assert "record it, do not publish again" in line.answer
    assert line.cost == "0"
    assert ledger_state(run) == before


def test_publish_the_platform_never_received_is_planned_as_a_call(in_process, demo_service):
    run = run_in_process({"timeout": "publish/publish/after"})
    # The platform has no such article (as if the timed-out request never arrived).
    [article] = demo_service.articles()
    demo_service.delete_article(article["id"])

    plan = compute_plan(run)
    line = lines_by_call(plan)["publish"]

    assert line.action == Action.CALL
    assert "not found on the target" in line.answer
    assert plan.blockers == []


def test_publish_found_with_different_content_blocks_the_plan(in_process, demo_service):
    run = run_in_process({"timeout": "publish/publish/after"})
    # Someone edited the live article on the platform: it no longer matches the request.
    [article] = demo_service.articles()
    demo_service.edit_article(article["id"], body="edited on the platform")

    plan = compute_plan(run)
    line = lines_by_call(plan)["publish"]

    assert line.action == Action.BLOCKED
    assert "found but different" in line.answer
    assert len(plan.blockers) == 1 and "publish" in plan.blockers[0]
    assert not plan.can_strict


def test_same_content_under_another_delivery_key_is_not_taken_for_this_publish(
    in_process, demo_service
):
    run = run_in_process({"timeout": "publish/publish/after"})
    # The only article with this content belongs to another delivery (another run's key).
    [article] = demo_service.articles()
    demo_service.edit_article(article["id"], delivery_key="f" * 64)

    line = lines_by_call(compute_plan(run))["publish"]

    assert line.action == Action.CALL
    assert "not found on the target" in line.answer


def test_same_content_published_by_hand_without_a_key_is_recorded_not_republished(
    in_process, demo_service
):
    run = run_in_process({"timeout": "publish/publish/after"})
    # A human published it outside any pipeline: same title and content, no delivery key.
    [article] = demo_service.articles()
    demo_service.edit_article(article["id"], delivery_key="")

    line = lines_by_call(compute_plan(run))["publish"]

    assert line.action == Action.RECORD_FOUND
    assert "do not publish again" in line.answer


def test_never_effect_with_unknown_outcome_blocks_the_plan(in_process):
    run = run_in_process({"timeout": "publish/promote-charge/after"})
    assert run.status == Run.Status.FAILED

    plan = compute_plan(run)
    line = lines_by_call(plan)["promote-charge"]

    assert line.status == Effect.Status.UNKNOWN
    assert line.action == Action.BLOCKED
    [blocker] = plan.blockers
    assert "promote-charge" in blocker and "supervisor" in blocker
    assert not plan.can_strict and not plan.can_upgrade


@pytest.mark.parametrize(
    ("status", "action"),
    [
        (Effect.Status.CONFIRMED, Action.REUSE),
        (Effect.Status.FAILED, Action.CALL),
        (Effect.Status.ABANDONED, Action.SKIP),
    ],
)
def test_supervisor_ledger_edit_unblocks_the_never_effect(in_process, demo_service, status, action):
    run = run_in_process({"timeout": "publish/promote-charge/after"})
    changes = {"status": status}
    if status == Effect.Status.CONFIRMED:
        [charge] = demo_service.charges()
        changes["external_id"] = charge["id"]
    edit_effect(
        effect(run, "promote-charge").pk,
        changes,
        reason="checked with the card processor",
        actor="user:supervisor",
    )

    plan = compute_plan(run)

    assert plan.blockers == []
    assert plan.can_strict
    assert lines_by_call(plan)["promote-charge"].action == action

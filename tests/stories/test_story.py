"""The protocol's story end to end with real Redis and real worker processes."""

from __future__ import annotations

from runs.execution.sweeper import SWEEPER
from runs.models import ApprovalMode, Checkpoint, Effect, Event, Run
from runs.planning.planner import Action, compute_plan
from runs.planning.resume import approve
from tests.support.processes import wait_for
from tests.support.state import run_status


def test_story_crash_leaves_checkpoints_and_an_open_cover_upload(story_run):
    run = story_run
    stages = set(Checkpoint.objects.filter(run=run).values_list("stage", flat=True))
    assert stages == {"research", "draft"}
    effects = {e.call_id: e for e in Effect.objects.filter(run=run)}
    for call in ("render-body-1", "upload-body-1", "render-body-2", "upload-body-2"):
        assert effects[call].status == Effect.Status.CONFIRMED
        assert effects[call].external_id
    assert effects["upload-cover"].status == Effect.Status.INTENT
    assert effects["upload-cover"].external_id == ""


def test_strict_resume_of_the_story_renders_body_images_once_and_publishes_once(
    story_run, workers, demo_service
):
    run = story_run
    plan = compute_plan(run)
    assert plan.next_stage == "visual"
    actions = {e.call_id: e.action for e in plan.effects}
    assert actions["render-body-1"] == Action.REUSE
    assert actions["upload-body-2"] == Action.REUSE
    assert actions["upload-cover"] == Action.RETRY_SAME_KEY
    assert plan.cost_resume.tool_calls < plan.cost_fresh.tool_calls

    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    wait_for(lambda: run_status(run) == Run.Status.SUCCEEDED, what="succeeded")

    assert len(demo_service.renders()) == 3
    assert demo_service.count("render") == 3
    assert len(demo_service.articles()) == 1


def test_story_interruption_is_written_by_a_second_workers_sweeper_fencing_the_dead_one(
    story_run,
):
    run = story_run
    interrupted = Event.objects.get(run=run, type=Event.Type.INTERRUPTED)
    dead = Event.objects.filter(run=run, type=Event.Type.STARTED).latest("seq")
    assert interrupted.actor == SWEEPER
    assert interrupted.payload["reason"] == "the worker stopped renewing its lease"
    assert interrupted.payload["holder"] == dead.payload["worker"]
    assert interrupted.token > dead.token
    # Nothing after the dead worker's last write but the sweeper's event.
    assert interrupted.seq == run.last_seq
    assert Event.objects.filter(run=run, token=dead.token).latest("seq").seq < interrupted.seq

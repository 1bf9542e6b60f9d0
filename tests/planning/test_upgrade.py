"""Input drift: the facts move to v4 while a run is interrupted. Strict resume keeps what the
run pinned (v3); an upgrade is a new branch whose parent is superseded and whose affected
stages run and are verified again with v4.
"""

from __future__ import annotations

import pytest

from demo.simulators import publish_facts
from runs.ledger.edits import edit_effect
from runs.models import ApprovalMode, Checkpoint, Effect, Event, Run
from runs.planning.plan import MadeAgain
from runs.planning.planner import compute_plan
from runs.planning.resume import ResumeRefused, approve
from tests.support.plans import (
    TOPIC,
    checkpoint,
    crashed_run,
    effect,
    event_types,
    ledger_state,
    run_in_process,
    wait_succeeded,
)

ALL_STAGES = ["research", "draft", "visual", "prefill", "publish"]


@pytest.fixture
def in_process(transactional_db, facts, redis_conn) -> None:
    """Committed rows for the engine's own threads, the demo facts, an empty queue."""


def started_stages(run: Run, after_seq: int = 0) -> list[Event]:
    return list(
        Event.objects.filter(run=run, type=Event.Type.STARTED, seq__gt=after_seq).order_by("seq")
    )


def test_plan_shows_the_facts_drift_and_an_upgrade_that_reruns_research_onward(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    publish_facts(TOPIC)

    plan = compute_plan(run)

    assert [(d.input, d.pinned, d.current) for d in plan.drift] == [("facts", "v3", "v4")]
    # Strict still continues where the run stopped, on what it pinned.
    assert plan.next_stage == "visual"
    upgrade = plan.upgrade
    assert upgrade.available
    # research consumes the facts, so no checkpoint of this run survives the upgrade.
    assert upgrade.branch_checkpoint is None
    assert upgrade.branch_stage == "research"
    assert upgrade.stages_rerun == ALL_STAGES
    assert upgrade.inputs == {**run.inputs, "facts": "v4"}
    assert upgrade.warnings == []  # nothing published yet


def test_strict_resume_after_drift_keeps_facts_v3_in_every_later_stage(workers):
    # Killed inside research, so the stage that reads the facts runs again after the resume.
    run = crashed_run(workers, {"crash": "research/search-1/after"})
    publish_facts(TOPIC)
    plan = compute_plan(run)
    assert [(d.pinned, d.current) for d in plan.drift] == [("v3", "v4")]

    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    wait_succeeded(run)

    resumed = Event.objects.get(run=run, type=Event.Type.RESUMED)
    assert resumed.payload["pinned_inputs"]["facts"] == "v3"
    started = started_stages(run, resumed.seq)
    assert [e.stage for e in started] == ALL_STAGES
    assert started[0].inputs["facts"] == "v3"
    assert all(e.inputs.get("facts", "v3") == "v3" for e in started)
    manifests = [cp.manifest for cp in Checkpoint.objects.filter(run=run)]
    assert len(manifests) == len(ALL_STAGES)
    assert all(m["pinned"]["facts"] == "v3" for m in manifests)
    research = checkpoint(run, "research")
    assert research.manifest["inputs"]["facts"] == "v3"
    assert research.outputs["facts_version"] == "v3"
    assert Run.objects.count() == 1  # no branch


def test_upgrade_branch_reruns_research_onward_with_facts_v4_and_supersedes_the_parent(
    story_run,
):
    run = story_run
    publish_facts(TOPIC)
    plan = compute_plan(run)

    approval = approve(run, ApprovalMode.UPGRADE, plan.fingerprint, actor="user:operator")
    branch = wait_succeeded(approval.branch)

    run.refresh_from_db()
    assert run.status == Run.Status.SUPERSEDED
    assert branch.parent_id == run.pk
    assert branch.branch_checkpoint_id is None
    assert branch.inputs["facts"] == "v4"
    assert event_types(run)[-1] == Event.Type.BRANCHED
    assert Event.objects.get(run=run, type=Event.Type.BRANCHED).payload["branch"] == (
        branch.public_id
    )
    assert [e.stage for e in started_stages(branch)] == ALL_STAGES
    research = checkpoint(branch, "research")
    assert research.manifest["inputs"]["facts"] == "v4"
    assert research.outputs["facts_version"] == "v4"
    assert all(cp.manifest["pinned"]["facts"] == "v4" for cp in branch.checkpoints.all())


def test_upgrade_plan_warns_about_the_article_the_parent_already_published(
    in_process, demo_service
):
    run = run_in_process({"timeout": "publish/promote-charge/after"})
    [article] = demo_service.articles()
    publish_facts(TOPIC)

    warnings = compute_plan(run).upgrade.warnings

    assert warnings == [
        MadeAgain(
            run=run.public_id,
            tool="publish_article",
            call_id="publish",
            made_as=article["id"],
            stage="publish",
            verb="publish",
        )
    ]
    assert "new key" in str(warnings[0])


def test_upgrade_plan_warns_about_an_article_found_on_the_platform_but_never_recorded(
    in_process, demo_service
):
    # The publish timed out: the ledger does not know, but the platform has the article.
    run = run_in_process({"timeout": "publish/publish/after"})
    [article] = demo_service.articles()
    assert effect(run, "publish").status == Effect.Status.UNKNOWN
    publish_facts(TOPIC)

    warnings = compute_plan(run).upgrade.warnings

    assert [(w.call_id, w.made_as) for w in warnings] == [("publish", article["id"])]


def test_upgrade_approval_records_what_reconcile_found_before_branching(in_process, demo_service):
    run = run_in_process({"timeout": "publish/publish/after"})
    [article] = demo_service.articles()
    publish_facts(TOPIC)

    approve(run, ApprovalMode.UPGRADE, compute_plan(run).fingerprint, actor="user:operator")

    # The superseded parent's ledger says what happened: the article it made is confirmed.
    found = effect(run, "publish")
    assert (found.status, found.external_id) == (Effect.Status.CONFIRMED, article["id"])
    tail = event_types(run)[-3:]
    assert tail == [Event.Type.PLAN_APPROVED, Event.Type.RECONCILED, Event.Type.BRANCHED]


def test_the_branch_and_its_parent_record_the_warnings_as_fields(in_process, demo_service):
    run = run_in_process({"timeout": "publish/publish/after"})
    [article] = demo_service.articles()
    publish_facts(TOPIC)

    approval = approve(
        run, ApprovalMode.UPGRADE, compute_plan(run).fingerprint, actor="user:operator"
    )

    branched = Event.objects.get(run=run, type=Event.Type.BRANCHED).payload["warnings"]
    created = Event.objects.get(run=approval.branch, type=Event.Type.RUN_CREATED)
    assert (
        branched
        == created.payload["warnings"]
        == [
            {
                "run": run.public_id,
                "tool": "publish_article",
                "call_id": "publish",
                "made_as": article["id"],
                "stage": "publish",
                "verb": "publish",
            }
        ]
    )


def test_upgrade_after_a_publish_makes_the_second_article_its_warning_announced(
    workers, demo_service
):
    # The article is live; the worker dies before the promotion charge is attempted.
    run = crashed_run(workers, {"crash": "publish/promote-charge/before"})
    [first] = demo_service.articles()
    assert demo_service.charges() == []
    edit_effect(
        effect(run, "promote-charge").pk,
        {"status": Effect.Status.FAILED},
        reason="the card processor has no such charge",
        actor="user:supervisor",
    )
    publish_facts(TOPIC)
    plan = compute_plan(run)
    assert first["id"] in [w.made_as for w in plan.upgrade.warnings]

    branch = wait_succeeded(
        approve(run, ApprovalMode.UPGRADE, plan.fingerprint, actor="user:operator").branch
    )

    articles = demo_service.articles()
    assert articles[0]["id"] == first["id"] and len(articles) == 2
    assert articles[0]["delivery_key"] != articles[1]["delivery_key"]
    assert checkpoint(branch, "publish").outputs["article_id"] == articles[1]["id"]
    assert len(demo_service.charges()) == 1


def test_upgrade_without_drift_is_refused(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    plan = compute_plan(run)
    before = ledger_state(run)

    with pytest.raises(ResumeRefused, match="no upgrade is possible"):
        approve(run, ApprovalMode.UPGRADE, plan.fingerprint, actor="user:operator")

    assert not plan.upgrade.available
    assert ledger_state(run) == before


def test_upgrade_plan_prices_each_branch_call_as_a_call_that_may_be_reused(in_process):
    run = run_in_process({"timeout": "visual/upload-cover/after"})
    publish_facts(TOPIC)

    lines = compute_plan(run).upgrade.effects

    renders = [e for e in lines if e.tool == "render_image"]
    assert {e.action for e in renders} == {"call"}
    assert {e.answer for e in renders} == {"call, or reuse if the request comes out unchanged"}
    search = next(e for e in lines if e.tool == "search")
    assert (search.action, search.answer) == ("re-run", "")


def test_a_branch_that_reuses_what_its_parent_made_keeps_its_plan_with_fewer_calls(in_process):
    from demo.management.commands.seed_demo import run_inline

    run = run_in_process({"timeout": "visual/upload-cover/after"})
    publish_facts(TOPIC)
    approval = approve(run, ApprovalMode.UPGRADE, compute_plan(run).fingerprint, actor="op")

    branch = run_inline(approval.branch.pk)

    assert branch.status == Run.Status.SUCCEEDED
    assert Event.Type.PLAN_DEVIATED not in event_types(branch)
    kept = Event.objects.get(run=branch, type=Event.Type.PLAN_KEPT)
    promised, used = kept.payload["promised"]["calls"], kept.payload["used"]["calls"]
    # The renders' prompts (the title) came out unchanged: reused, not rendered again.
    assert used.get("render_image", 0) < promised["render_image"]
    assert all(used.get(tool, 0) <= n for tool, n in promised.items())
    assert float(kept.payload["used"]["money"]) < float(kept.payload["promised"]["money"])

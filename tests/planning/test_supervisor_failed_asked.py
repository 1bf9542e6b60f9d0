"""A supervisor's "it did not happen" on a RECONCILE_FIRST effect is their word, not the
target's: the plan and the engine ask the target by the key before the call is made again,
so a mistaken edit of a published article does not publish it a second time."""

from __future__ import annotations

import pytest

from runs import engine
from runs.ledger.edits import edit_effect
from runs.models import ApprovalMode, Effect, Event, Run
from runs.pipeline import Reconciliation
from runs.planning import replay
from runs.planning.planner import compute_plan
from runs.planning.replay import Action, Recorded, StopKind
from runs.planning.resume import approve
from runs.planning.target_lookup import ask_target, record_answer
from tests.planning.test_plan_contract import publish_calls_since, top_meter, verdicts
from tests.support.plans import effect, run_in_process


@pytest.fixture
def published_said_failed(transactional_db, facts, redis_conn) -> tuple[Run, str]:
    """A run that published its article and failed on the charge after it, whose supervisor
    then recorded the article as never published (and the charge as not to be made)."""
    run = run_in_process({"timeout": "publish/promote-charge/after"})
    article = effect(run, "publish").external_id
    assert article
    edit_effect(
        effect(run, "publish").pk,
        {"status": Effect.Status.FAILED, "external_id": ""},
        reason="I think it never went live",
        actor="user:supervisor",
    )
    edit_effect(
        effect(run, "promote-charge").pk,
        {"status": Effect.Status.ABANDONED},
        reason="no promotion this time",
        actor="user:supervisor",
    )
    run.refresh_from_db()
    return run, article


def test_the_plan_asks_the_target_of_an_article_a_supervisor_recorded_as_failed(
    published_said_failed,
):
    run, article = published_said_failed

    plan = compute_plan(run)

    [line] = [e for e in plan.effects if e.call_id == "publish"]
    assert line.action == Action.RECORD_FOUND
    assert line.external_id == article
    assert "a supervisor recorded that it did not happen (user:supervisor)" in line.answer
    assert "found on the target" in line.answer


def test_a_resume_records_the_article_found_and_does_not_publish_it_again(
    published_said_failed,
):
    run, article = published_said_failed
    plan = compute_plan(run)
    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    mark = top_meter()
    run.refresh_from_db()

    engine.execute(run.pk, run.current_stage, run.ticket, holder="test:in-process")

    run.refresh_from_db()
    assert publish_calls_since(mark) == 0
    assert (effect(run, "publish").status, effect(run, "publish").external_id) == (
        Effect.Status.CONFIRMED,
        article,
    )
    assert run.status == Run.Status.SUCCEEDED
    assert verdicts(run) == [Event.Type.PLAN_KEPT]


def publish_decided(recorded: Recorded, answer, unanswered: str):
    """The decision on a RECONCILE_FIRST publish whose target answered `answer` (or could
    not be asked: `unanswered`)."""
    return replay.decide(
        tool="publish_article",
        call_id="publish",
        policy="RECONCILE_FIRST",
        recorded=recorded,
        answer=answer,
        unanswered=unanswered,
    )


@pytest.mark.parametrize(
    ("answer", "unanswered", "action"),
    [
        (Reconciliation(found=False, detail="no such article"), "", Action.CALL),
        (Reconciliation(found=True, external_id="art-1"), "", Action.RECORD_FOUND),
        (Reconciliation(found=True, matches=False), "", Action.BLOCKED),
        (None, "platform did not answer within 5 s", Action.BLOCKED),
    ],
)
def test_a_reconcile_first_effect_a_supervisor_failed_is_decided_on_the_targets_answer(
    answer, unanswered, action
):
    recorded = Recorded(Effect.Status.FAILED, "h", edited_by="user:sue")
    assert replay.asks_target("RECONCILE_FIRST", recorded)

    decision = publish_decided(recorded, answer, unanswered)

    assert decision.action == action
    assert decision.answer.startswith("a supervisor recorded that it did not happen (user:sue)")
    if unanswered:
        assert decision.kind == StopKind.UNANSWERED


@pytest.mark.parametrize("policy", ["IDEMPOTENT", "NEVER"])
def test_other_policies_take_a_supervisors_failed_at_their_word(policy):
    recorded = Recorded(Effect.Status.FAILED, "h", edited_by="user:sue")
    assert not replay.asks_target(policy, recorded)

    decision = replay.decide(tool="t", call_id="c", policy=policy, recorded=recorded)

    assert decision.action == Action.CALL


def test_the_targets_own_refusal_is_not_asked_about_again():
    recorded = Recorded(Effect.Status.FAILED, "h", error="422 title too long")
    assert not replay.asks_target("RECONCILE_FIRST", recorded)
    decision = replay.decide(tool="t", call_id="c", policy="RECONCILE_FIRST", recorded=recorded)
    assert decision.action == Action.CALL


# --- A supervisor's "confirmed" of a RECONCILE_FIRST effect, checked the same way ------------


@pytest.mark.parametrize(
    ("answer", "unanswered", "action"),
    [
        (Reconciliation(found=True, external_id="art-1"), "", Action.REUSE),
        (Reconciliation(found=True), "", Action.REUSE),
        (Reconciliation(found=True, external_id="art-2"), "", Action.BLOCKED),
        (Reconciliation(found=False, detail="no such article"), "", Action.BLOCKED),
        (None, "platform did not answer within 5 s", Action.REUSE),
    ],
)
def test_a_reconcile_first_effect_a_supervisor_confirmed_is_held_to_the_targets_answer(
    answer, unanswered, action
):
    recorded = Recorded(Effect.Status.CONFIRMED, "h", "art-1", edited_by="user:sue")
    assert replay.asks_target("RECONCILE_FIRST", recorded)

    decision = publish_decided(recorded, answer, unanswered)

    assert decision.action == action
    assert decision.answer.startswith("confirmed as art-1, recorded by a supervisor (user:sue)")


@pytest.fixture
def published_said_another(transactional_db, facts, redis_conn) -> tuple[Run, str]:
    """A run whose publish's answer never came (the platform holds the article), which a
    supervisor then confirmed as another run's article, without asking the platform."""
    run = run_in_process({"timeout": "publish/publish/after"})
    publish = effect(run, "publish")
    edit_effect(
        publish.pk,
        {"status": Effect.Status.CONFIRMED, "external_id": "art-999"},
        reason="it went out as art-999",
        actor="user:supervisor",
    )
    run.refresh_from_db()
    return run, publish.delivery_key


def test_a_supervisors_confirmation_the_target_contradicts_blocks_the_plan(
    published_said_another,
):
    run, _ = published_said_another

    plan = compute_plan(run)

    [line] = [e for e in plan.effects if e.call_id == "publish"]
    assert line.action == Action.BLOCKED
    assert "but the target holds art-" in line.answer and plan.blocked


def test_the_effect_page_asks_and_records_what_the_target_holds_instead(
    published_said_another, demo_service
):
    from runs.planning import stored_plans
    from tests.support.web import client_as

    run, _ = published_said_another
    stored_plans.refresh(run)
    publish = effect(run, "publish")
    url = f"/runs/{run.public_id}/effects/{publish.pk}/"
    supervisor = client_as("supervisor")

    asked = supervisor.post(url + "ask/", follow=True).content.decode()
    assert 'id="contradicted"' in asked
    event = Event.objects.filter(run=run, type=Event.Type.TARGET_ASKED).get()
    supervisor.post(url + "record/", {"asked": event.seq})

    held = event.payload["external_id"]
    assert (effect(run, "publish").status, effect(run, "publish").external_id) == (
        Effect.Status.CONFIRMED,
        held,
    )
    plan = compute_plan(run)
    [line] = [e for e in plan.effects if e.call_id == "publish"]
    assert line.action == Action.REUSE and held.startswith("art-")


def test_a_resume_reusing_what_a_supervisor_confirmed_asks_and_publishes_nothing(
    published_said_another,
):
    run, _ = published_said_another
    publish = effect(run, "publish")
    asked = ask_target(publish.pk, actor="user:supervisor")
    record_answer(publish.pk, asked.seq, actor="user:supervisor")
    plan = compute_plan(run)
    assert plan.cost_resume.queries == {"publish_article": 1}
    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    mark = top_meter()
    run.refresh_from_db()

    engine.execute(run.pk, run.current_stage, run.ticket, holder="test:in-process")

    assert publish_calls_since(mark) == 0
    reused = Event.objects.filter(run=run, type=Event.Type.TOOL_RESULT, seq__gt=plan.last_seq)
    assert [e.payload.get("reused") for e in reused if e.payload["call"] == "publish"] == [True]
    # Asked once by the engine, as the plan counted: not a departure from it.
    assert not Event.objects.filter(run=run, type=Event.Type.PLAN_DEVIATED).exists()

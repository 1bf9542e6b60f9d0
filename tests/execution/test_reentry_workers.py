"""A stage run again in the same run, on real `rqworker` processes (issue 44's acceptance):
after a gate's answer it replays what it recorded instead of reading, asking a model or
paying again; killed after a gate and strictly resumed, it keeps its plan; a clock in a
prompt is a divergence that stops the stage before anything is billed again, unless the
clock is the recorded one (ctx.now()) or the pipeline chose to record and go on.

Every count is read at the target (tests/execution/reentry_pipelines.py: the calendar and the
mailbox keep their requests; the demo service's meter its completions), every wait is on
database state.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import reverse

from demo import faults
from runs.gates import answers
from runs.gates.acts import TICK
from runs.models import ApprovalMode, Checkpoint, Event, Gate, GateStatus, Run, StoredPlan
from runs.planning.plan import Plan
from runs.planning.planner import compute_plan
from runs.planning.replay import Action, StopKind
from runs.planning.resume import ResumeRefused, approve
from tests.execution import reentry_pipelines as rp
from tests.support.pipelines import registered
from tests.support.processes import Workers, wait_for
from tests.support.state import run_status
from tests.support.web import client_as

pytestmark = [pytest.mark.workers, pytest.mark.django_db(transaction=True)]

OPERATOR = frozenset({"operator"})
WORKER_PIPELINES = ",".join(["demo.pipeline.content_pipeline", *rp.PATHS])
SLOW = 180


@pytest.fixture(autouse=True)
def reentry_pipelines(settings) -> Iterator[None]:
    with registered(settings, *rp.PATHS):
        yield


@pytest.fixture(autouse=True)
def empty_targets() -> None:
    """The calendar and the mailbox start empty: a test process's media folder outlives a test."""
    for name in ("calendar-reads", "bookings", "mailbox"):
        rp.target_file(name).unlink(missing_ok=True)


def started(workers: Workers, pipeline: str, **faults_spec: str) -> Run:
    run = faults.start_run(pipeline, {}, actor="test", faults=faults_spec or None)
    workers.start(pipeline, env={"RESUMER_PIPELINES": WORKER_PIPELINES})
    return run


def approve_gate(run: Run, gate_id: str) -> None:
    gate = wait_for(
        lambda: (
            run_status(run) == Run.Status.WAITING
            and Gate.objects.filter(run=run, gate_id=gate_id, status=GateStatus.OPEN).first()
        ),
        timeout=SLOW,
        what=f"{run.public_id} to wait at {gate_id}",
    )
    answers.answer(gate.pk, {"decision": "approve", TICK: "on"}, actor="ana", roles=OPERATOR)


def ended(run: Run, *statuses: str) -> str:
    wanted = statuses or (Run.Status.SUCCEEDED,)
    return wait_for(
        lambda: (status := run_status(run)) in wanted and status,
        timeout=SLOW,
        what=f"{run.public_id} to end in {wanted}",
    )


def events(run: Run, kind: str) -> list[Event]:
    return list(Event.objects.filter(run=run, type=kind).order_by("seq"))


def test_a_stage_with_two_reads_and_two_confirmations_reads_exactly_twice(workers, demo_service):
    run = started(workers, "reentry-reads")
    approve_gate(run, "book")
    approve_gate(run, "send")

    assert ended(run) == Run.Status.SUCCEEDED
    assert [r["day"] for r in rp.served("calendar-reads")] == ["mon", "tue"]
    assert len(rp.served("bookings")) == 1 and len(rp.served("mailbox")) == 1
    # The stage finished on the answers its reviewers saw: the first and second reads.
    assert Checkpoint.objects.get(run=run).manifest["outputs"]["reads_seen"] == [1, 2]
    replayed = [e for e in events(run, Event.Type.TOOL_RESULT) if e.payload.get("replayed")]
    # Entering after the first answer replays read-1; after the second, read-1 and read-2.
    assert [e.payload["call"] for e in replayed] == ["read-1", "read-1", "read-2"]
    assert not events(run, Event.Type.DIVERGED)


def test_a_worker_killed_mid_loop_after_a_gate_and_strictly_resumed_keeps_its_plan(
    workers, demo_service
):
    run = started(workers, "reentry-loop", crash="work/turn-2/after")
    chats_before = demo_service.count("chat")
    approve_gate(run, "book")
    # The answer queues the stage: read-1 and turn-1 replayed, the meeting booked, read-2,
    # then the worker dies right after turn-2's completion, before its outcome is recorded.
    workers.start("healthy", env={"RESUMER_PIPELINES": WORKER_PIPELINES})
    assert ended(run, Run.Status.INTERRUPTED) == Run.Status.INTERRUPTED
    run.refresh_from_db()
    plan = compute_plan(run)
    actions = {line.call_id: line.action for line in plan.effects}
    assert actions == {
        "read-1": Action.REPLAY,
        "turn-1": Action.REUSE,
        "book": Action.REUSE,
        "read-2": Action.REPLAY,
        "turn-2": Action.RETRY_SAME_KEY,
        "send": Action.CALL,
    }
    reads, bookings, chats = (
        len(rp.served("calendar-reads")),
        len(rp.served("bookings")),
        demo_service.count("chat"),
    )
    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:op")
    approve_gate(run, "send")

    assert ended(run) == Run.Status.SUCCEEDED
    kept = events(run, Event.Type.PLAN_KEPT)
    assert len(kept) == 1 and not events(run, Event.Type.PLAN_DEVIATED)
    # What the plan counted is what the targets served after the approval.
    assert plan.cost_resume.calls == {"model": 1, "send_email": 1}
    assert len(rp.served("calendar-reads")) - reads == 0
    assert len(rp.served("bookings")) - bookings == 0
    assert demo_service.count("chat") - chats == plan.cost_resume.calls["model"]
    assert len(rp.served("mailbox")) == plan.cost_resume.calls["send_email"]
    # Before the crash: turn-1 and turn-2 once each; after it, turn-2 again under its key.
    assert demo_service.count("chat") - chats_before == 3
    assert [r["day"] for r in rp.served("calendar-reads")] == ["mon", "tue"]


def test_a_clock_in_the_prompt_diverges_on_reentry_and_stops_before_billing_again(
    workers, demo_service
):
    run = started(workers, "reentry-clock")
    approve_gate(run, "send")

    assert ended(run, Run.Status.NEEDS_APPROVAL) == Run.Status.NEEDS_APPROVAL
    [diverged] = events(run, Event.Type.DIVERGED)
    assert diverged.payload["call"] == "turn-1" and diverged.payload["stopped"] is True
    assert diverged.payload["diff"][0]["path"] == "key"
    assert any("content" in d["path"] for d in diverged.payload["diff"])
    # The reason names the request's own difference, not the key that follows from it.
    assert "first at args.messages[0].content" in diverged.payload["reason"]
    [stop] = events(run, Event.Type.NEEDS_APPROVAL)
    assert stop.payload["kind"] == StopKind.DIVERGED and stop.seq == diverged.seq + 1
    # One completion, before the gate; nothing billed again, nothing sent.
    assert demo_service.count("chat") == 1
    assert rp.served("mailbox") == []
    assert run.effects.filter(call_id="turn-1").count() == 1

    stored = wait_for(
        lambda: StoredPlan.objects.filter(
            run=run, run_version=Run.objects.get(pk=run.pk).version
        ).first(),
        timeout=SLOW,
        what="the stored plan",
    )
    plan = Plan.from_dict(stored.data)
    line = next(line for line in plan.effects if line.call_id == "turn-1")
    assert (line.action, line.kind) == (Action.BLOCKED, StopKind.DIVERGED)
    assert diverged.payload["reason"] in plan.blockers
    assert plan.upgrade.available and plan.upgrade.branch_stage == "draft"
    # Said where people look: the inbox's reason, the run page, /metrics.
    inbox = client_as("operator").get(reverse("runs:inbox")).content.decode()
    assert "diverged at turn-1" in inbox
    page = client_as("viewer").get(reverse("runs:run", args=[run.pk])).content.decode()
    assert "Diverged" in page and "turn-1" in page
    scraped = Client().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert (
        'resumer_divergences_total{outcome="stopped",pipeline="reentry-clock",tool="model"} 1.0'
        in scraped
    )


def test_a_run_stopped_on_a_divergence_is_upgraded_into_a_branch_that_runs_its_stage_afresh(
    workers, demo_service
):
    run = started(workers, "reentry-clock")
    approve_gate(run, "send")
    ended(run, Run.Status.NEEDS_APPROVAL)
    plan = compute_plan(run)
    assert plan.blocked and not plan.can_strict and plan.can_upgrade
    wait_for(
        lambda: StoredPlan.objects.filter(run=run, fingerprint=plan.fingerprint).exists(),
        timeout=SLOW,
        what="the stored plan",
    )
    page = client_as("operator").get(reverse("runs:run", args=[run.pk])).content.decode()
    assert "upgrade it into a new branch, which runs the stage afresh" in page
    assert 'name="action" value="upgrade">Upgrade</button>' in page
    with pytest.raises(ResumeRefused, match="the plan is blocked"):
        approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:op")

    approve(run, ApprovalMode.UPGRADE, plan.fingerprint, actor="user:op")

    assert run_status(run) == Run.Status.SUPERSEDED
    branch = Run.objects.get(parent=run)
    # The branch runs draft afresh: one more completion, then its own confirmation of send.
    gate = wait_for(
        lambda: Gate.objects.filter(run=branch, gate_id="send", status=GateStatus.OPEN).first(),
        timeout=SLOW,
        what="the branch to ask about send",
    )
    assert gate.run_id == branch.pk
    assert demo_service.count("chat") == 2
    assert rp.served("mailbox") == []
    assert not events(branch, Event.Type.DIVERGED)


def test_the_recorded_clock_replays_and_bills_nothing_twice(workers, demo_service):
    run = started(workers, "reentry-recorded-clock")
    approve_gate(run, "send")

    assert ended(run) == Run.Status.SUCCEEDED
    assert demo_service.count("chat") == 1
    assert len(rp.served("mailbox")) == 1
    assert not events(run, Event.Type.DIVERGED)
    [clock] = events(run, Event.Type.VALUE_RECORDED)
    assert clock.payload["name"] == "now-1"


def test_a_pipeline_that_records_divergences_goes_on_with_the_new_request(workers, demo_service):
    run = started(workers, "reentry-clock-anyway")
    approve_gate(run, "go")

    assert ended(run) == Run.Status.SUCCEEDED
    [diverged] = events(run, Event.Type.DIVERGED)
    assert diverged.payload["stopped"] is False
    assert demo_service.count("chat") == 2  # the new conversation was asked, as chosen
    assert run.effects.filter(call_id="turn-1").count() == 2

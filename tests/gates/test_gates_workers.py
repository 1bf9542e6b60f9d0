"""Gates on real `rqworker` processes (issue 23's acceptance): a run that waits for a human
holds no worker, lease or job, survives a restart and a Redis flush, and goes on exactly once
when it is answered; a worker killed after an answer is resumed without asking again;
answers race, roles refuse, time-outs apply, edits reach the target under their own key,
rejections stop the stage, two gates in a stage are asked one at a time, identical gates
are answered in bulk, a two-person gate takes its time-out's default at the deadline
whatever its votes, and is settled by two different people only, and an untouched list is
sent as the list it was (an edited one as a list), an edited amount as what the ledger, the
plan and the verdict say.

Every wait is on database state (tests/support/processes.wait_for); nothing asserts on time.
The demo's reviewed runs (input review=on) ask "review" before publish and a supervisor's
confirmation of the charge; the small pipelines of tests/gates/pipelines.py are registered
here and, through RESUMER_PIPELINES, in every worker these tests start.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.db.models.functions import Now
from django.urls import reverse

from demo import faults
from demo.pipeline import content_hash
from demo.simulators import ensure_topic
from runs import engine, enqueue
from runs.gates import answers
from runs.gates.acts import TICK
from runs.gates.decision import GateAction, gate_digest
from runs.gates.shared import shared
from runs.models import ApprovalMode, Effect, Event, Gate, GateStatus, Lease, Run, StoredPlan
from runs.planning.plan import Plan
from runs.planning.planner import compute_plan
from runs.planning.resume import approve
from tests.gates import pipelines as gp
from tests.support.pipelines import registered
from tests.support.processes import Workers, wait_for
from tests.support.state import run_status, wait_open_gate
from tests.support.web import api_as, client_as, form_values

pytestmark = [pytest.mark.workers, pytest.mark.django_db(transaction=True)]

OPERATOR = frozenset({"operator"})
SUPERVISOR = frozenset({"supervisor"})
WORKER_PIPELINES = ",".join(["demo.pipeline.content_pipeline", *gp.PATHS])
# Generous: two cores shared with other test runs.
SLOW = 180


@pytest.fixture(autouse=True)
def gate_pipelines(settings) -> Iterator[None]:
    with registered(settings, *gp.PATHS):
        yield


def start_worker(workers: Workers, label: str = ""):
    return workers.start(label, env={"RESUMER_PIPELINES": WORKER_PIPELINES})


def settled(run: Run) -> str:
    return wait_for(
        lambda: (s := run_status(run)) in (*Run.TERMINAL, *Run.RESUMABLE) and s,
        timeout=SLOW,
        what=f"{run.public_id} to end",
    )


def opened(run: Run, gate_id: str) -> int:
    return Event.objects.filter(run=run, type=Event.Type.GATE_OPENED, payload__gate=gate_id).count()


def answered(run: Run, gate_id: str = "") -> list[Event]:
    events = Event.objects.filter(run=run, type=Event.Type.HUMAN_ANSWERED).order_by("seq")
    return [e for e in events if not gate_id or e.payload["gate"] == gate_id]


def lease_free(run: Run) -> bool:
    return Lease.objects.filter(run=run, holder="", expires_at__lte=Now()).exists()


def jobs_pending(run: Run, redis_conn) -> list[str]:
    """The run's stage jobs Redis holds that are not finished: queued, started, deferred,
    scheduled or failed (a finished job's hash lives on for its result TTL, and means
    nothing to the run)."""
    from rq.job import Job

    prefix = f"run-{run.pk}-"
    keys = [k.decode() for k in redis_conn.keys(f"rq:job:{prefix}*")]
    pending = []
    for key in keys:
        job = Job.fetch(key.removeprefix("rq:job:"), connection=redis_conn)
        if job.get_status() != "finished":
            pending.append(f"{job.id}={job.get_status()}")
    queue = enqueue.queue()
    pending += [j for j in queue.job_ids if j.startswith(prefix)]
    pending += [j for j in queue.started_job_registry.get_job_ids() if j.startswith(prefix)]
    return pending


def reviewed_run(workers: Workers, **faults_spec: str) -> Run:
    """A demo run with review=on, its worker started; it will wait at the review."""
    run = faults.start_run("content", {"review": "on"}, actor="test", faults=faults_spec or None)
    start_worker(workers, "reviewed")
    return run


def approve_review(run: Run, **changes: str) -> None:
    gate = wait_open_gate(run, "review")
    answers.answer(gate.pk, {**gate.initial, **changes}, actor="ana", roles=OPERATOR)


def approve_charge(run: Run, **data: str) -> None:
    gate = wait_open_gate(run, "promote-charge")
    answer = {"decision": "approve", TICK: "on", **data}
    answers.answer(gate.pk, answer, actor="sam", roles=SUPERVISOR)


# --- (a) waiting frees the worker ----------------------------------------------------------


def test_a_waiting_run_holds_no_lease_no_ticket_and_no_job(workers, redis_conn):
    run = reviewed_run(workers)

    wait_open_gate(run, "review")
    # The job ends (and lets the lease go) just after the gate's commit.
    wait_for(lambda: lease_free(run), timeout=SLOW, what="the lease let go")

    run.refresh_from_db()
    assert (run.status, run.ticket, run.current_stage) == (Run.Status.WAITING, "", "publish")
    lease = Lease.objects.get(run=run)
    assert lease.holder == ""
    # RQ marks the job finished once its function has returned, a moment after the release
    # that rode with the gate's commit: waited for, not read at once.
    wait_for(
        lambda: jobs_pending(run, redis_conn) == [],
        timeout=SLOW,
        what=f"{run.public_id}'s stage job to finish",
    )


# --- (b) it survives a worker restart and a Redis flush -------------------------------------


def test_a_waiting_run_survives_a_worker_restart_and_a_redis_flush(
    workers, redis_conn, demo_service
):
    run = reviewed_run(workers)
    review = wait_open_gate(run, "review")
    wait_for(lambda: lease_free(run), timeout=SLOW, what="the lease let go")
    workers.stop_all()
    redis_conn.flushdb()

    start_worker(workers, "after-flush")
    # Proof the new worker's sweeper has run past a deadline: a probe run's 1 s gate is
    # answered by its time-out (only a sweep does that), and the probe finishes.
    probe = engine.start_run("gate-timeout-default", {}, actor="test")
    assert settled(probe) == Run.Status.SUCCEEDED
    assert [e.payload["by"] for e in answered(probe)] == [answers.TIME_OUT]

    run.refresh_from_db()
    assert run.status == Run.Status.WAITING
    assert Gate.objects.get(pk=review.pk).status == GateStatus.OPEN
    assert not Event.objects.filter(run=run, type=Event.Type.INTERRUPTED).exists()

    approve_review(run)
    approve_charge(run)
    assert settled(run) == Run.Status.SUCCEEDED
    assert len(demo_service.articles()) == 1 and len(demo_service.charges()) == 1


# --- (c) an answer resumes the stage --------------------------------------------------------


def test_an_answer_resumes_the_stage_and_the_article_is_published_once(
    workers, redis_conn, demo_service
):
    run = reviewed_run(workers)

    approve_review(run, title="Reviewed title")
    approve_charge(run)

    assert settled(run) == Run.Status.SUCCEEDED
    assert [a["title"] for a in demo_service.articles()] == ["Reviewed title"]
    assert (opened(run, "review"), opened(run, "promote-charge")) == (1, 1)
    publish = run.checkpoints.get(stage="publish")
    assert publish.outputs["title"] == "Reviewed title"
    assert publish.outputs["charge"] == "charged"


# --- (d) a worker killed right after the answer ---------------------------------------------


def test_a_worker_killed_after_the_answer_is_resumed_without_asking_again(
    workers, redis_conn, demo_service
):
    run = reviewed_run(workers, crash="publish/review/after-answer")
    doomed = workers.procs[-1]
    approve_review(run)
    # The answer queues the stage; it finds the answer and its worker dies right there.
    doomed.wait(timeout=SLOW)
    assert doomed.returncode == -signal.SIGKILL

    start_worker(workers, "healthy")  # its sweeper finds the dead worker's lease run out
    wait_for(lambda: run_status(run) == Run.Status.INTERRUPTED, timeout=SLOW, what="interrupted")
    run.refresh_from_db()
    stored = wait_for(
        lambda: StoredPlan.objects.filter(run=run, run_version=run.version).first(),
        timeout=SLOW,
        what="the stored plan",
    )
    plan = Plan.from_dict(stored.data)
    line = next(g for g in plan.gates if (g.stage, g.gate_id) == ("publish", "review"))
    assert line.action == GateAction.USE_ANSWER
    assert "answer recorded" in line.said and line.said.endswith("not asked again")
    assert "by ana" in line.said
    assert demo_service.articles() == []  # nothing after the gate was called yet

    approve(run, ApprovalMode.STRICT, compute_plan(run).fingerprint, actor="user:op")
    approve_charge(run)

    assert settled(run) == Run.Status.SUCCEEDED
    assert opened(run, "review") == 1
    assert len(answered(run, "review")) == 1
    assert len(demo_service.articles()) == 1
    assert run.effects.filter(call_id="publish").count() == 1
    # Nothing before the gate ran again: the resume started at publish, whose first act is
    # the review, and called only what comes after it.
    resumed = Event.objects.get(run=run, type=Event.Type.RESUMED)
    after = Event.objects.filter(run=run, seq__gt=resumed.seq)
    assert set(after.filter(type=Event.Type.STARTED).values_list("stage", flat=True)) == {"publish"}
    called = after.filter(type=Event.Type.TOOL_CALLED).values_list("payload__call", flat=True)
    assert sorted(called) == ["promote-charge", "publish"]
    assert Event.objects.filter(run=run, type=Event.Type.PLAN_KEPT).count() == 1
    assert not Event.objects.filter(run=run, type=Event.Type.PLAN_DEVIATED).exists()


# --- (e) two answerers racing ---------------------------------------------------------------


def race(gate_pk: int, data: dict[str, Any], people: list[str]) -> dict[str, Any]:
    """Each person answers in a thread of their own (their own database connection), all
    released at once; returns what each got: an Answered or the exception."""
    barrier = threading.Barrier(len(people))
    got: dict[str, Any] = {}

    def answer(person: str) -> None:
        try:
            barrier.wait(timeout=30)
            got[person] = answers.answer(gate_pk, data, actor=person, roles=OPERATOR)
        except Exception as exc:
            got[person] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=answer, args=(p,)) for p in people]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return got


def test_two_people_answering_at_once_leave_exactly_one_answer(workers, redis_conn):
    run = engine.start_run("gate-question", {}, actor="test")
    start_worker(workers)
    gate = wait_open_gate(run, "go")

    got = race(gate.pk, {"decision": "approve", "notes": ""}, ["ana", "bob"])

    winners = [p for p, r in got.items() if isinstance(r, answers.Answered)]
    losers = [r for r in got.values() if not isinstance(r, answers.Answered)]
    assert len(winners) == 1, got
    assert len(losers) == 1 and isinstance(losers[0], answers.AlreadyAnswered), got
    assert f"already answered by {winners[0]}" in str(losers[0])
    assert [e.payload["by"] for e in answered(run)] == winners
    assert settled(run) == Run.Status.SUCCEEDED
    assert opened(run, "go") == 1


# --- (f) a wrong role -----------------------------------------------------------------------


def test_an_operator_may_not_answer_a_supervisors_charge_and_nothing_is_written(
    workers, redis_conn, demo_service
):
    run = engine.start_run("gate-charge", {}, actor="test")
    start_worker(workers)
    gate = wait_open_gate(run, "fee")
    wait_for(lambda: lease_free(run), timeout=SLOW, what="the lease let go")
    before = (Event.objects.filter(run=run).count(), Run.objects.get(pk=run.pk).version)

    with pytest.raises(answers.NotAllowed):
        answers.answer(gate.pk, {"decision": "approve"}, actor="ana", roles=OPERATOR)

    run.refresh_from_db()
    assert (Event.objects.filter(run=run).count(), run.version) == before
    gate.refresh_from_db()
    assert (gate.status, gate.votes, gate.answered_by) == (GateStatus.OPEN, [], "")
    assert run.status == Run.Status.WAITING and run.ticket == ""
    assert lease_free(run)
    assert demo_service.charges() == []


# --- (g) time-outs --------------------------------------------------------------------------


def test_a_time_out_records_the_default_answer_and_the_run_goes_on(workers, redis_conn):
    run = engine.start_run("gate-timeout-default", {}, actor="test")
    start_worker(workers)

    assert settled(run) == Run.Status.SUCCEEDED
    gate = Gate.objects.get(run=run, gate_id="go")
    assert (gate.status, gate.answered_by) == (GateStatus.ANSWERED, answers.TIME_OUT)
    [event] = answered(run)
    assert event.payload["by"] == answers.TIME_OUT
    assert event.payload["answer"] == gp.DEFAULT_ANSWER
    assert run.checkpoints.get(stage="decide").outputs == gp.DEFAULT_ANSWER
    assert opened(run, "go") == 1


def test_a_time_out_that_fails_fails_the_run_with_its_reason(workers, redis_conn):
    run = engine.start_run("gate-timeout-failing", {}, actor="test")
    start_worker(workers)

    assert settled(run) == Run.Status.FAILED
    failed = Event.objects.get(run=run, type=Event.Type.FAILED)
    assert gp.FAIL_REASON in failed.payload["error"]
    assert failed.payload["timed_out"] is True
    assert Gate.objects.get(run=run, gate_id="go").status == GateStatus.EXPIRED
    assert answered(run) == []


# --- (h) an edited call ---------------------------------------------------------------------


def test_an_edited_charge_reaches_the_target_under_the_edited_requests_key(
    workers, redis_conn, demo_service
):
    run = engine.start_run("gate-charge", {}, actor="test")
    start_worker(workers)
    gate = wait_open_gate(run, "fee")
    asked = dict(gate.call["args"])

    answers.answer(
        gate.pk,
        {"decision": "approve", "arg_amount": "3.50", TICK: "on"},
        actor="sam",
        roles=SUPERVISOR,
    )

    assert settled(run) == Run.Status.SUCCEEDED
    [charge] = demo_service.charges()
    assert charge["amount"] == "3.50"
    effect = Effect.objects.get(run=run, call_id="fee")
    assert effect.request["amount"] == "3.50"
    assert charge["delivery_key"] == effect.delivery_key
    run.refresh_from_db()
    unedited = gp.charge_key(_Root(run.root.public_id), asked).key
    assert effect.delivery_key != unedited
    [event] = answered(run, "fee")
    assert event.payload["diff"] == {"amount": [gp.FEE, "3.50"]}
    assert event.payload["by"] == "sam"


class _Root:
    """What a key function reads of a context: the root run's public id."""

    def __init__(self, root_id: str) -> None:
        self.root_id = root_id


# --- (i) a rejection stops the stage with the reason ----------------------------------------


def test_a_rejected_call_is_never_made_and_fails_the_stage_with_the_reason(
    workers, redis_conn, demo_service
):
    run = engine.start_run("gate-charge", {}, actor="test")
    start_worker(workers)
    gate = wait_open_gate(run, "fee")

    answers.answer(
        gate.pk,
        {"decision": "reject", "reason": "over this month's budget"},
        actor="sam",
        roles=SUPERVISOR,
    )

    assert settled(run) == Run.Status.FAILED
    failed = Event.objects.get(run=run, type=Event.Type.FAILED)
    assert "CallRejected" in failed.payload["error"]
    assert "over this month's budget" in failed.payload["error"]
    assert demo_service.charges() == []
    assert not Effect.objects.filter(run=run).exists()
    assert not Event.objects.filter(run=run, type=Event.Type.TOOL_CALLED).exists()


# --- (j) two gates in one stage -------------------------------------------------------------


def test_two_gates_in_one_stage_are_each_asked_once_and_both_answers_are_seen(workers, redis_conn):
    run = engine.start_run("gate-two", {}, actor="test")
    start_worker(workers)

    first = wait_open_gate(run, "first")
    assert not Gate.objects.filter(run=run, gate_id="second").exists()
    answers.answer(first.pk, {"decision": "approve", "notes": "one"}, actor="ana", roles=OPERATOR)
    second = wait_open_gate(run, "second")
    answers.answer(second.pk, {"decision": "approve", "notes": "two"}, actor="bob", roles=OPERATOR)

    assert settled(run) == Run.Status.SUCCEEDED
    assert (opened(run, "first"), opened(run, "second")) == (1, 1)
    assert [e.payload["gate"] for e in answered(run)] == ["first", "second"]
    assert run.checkpoints.get(stage="decide").outputs == {"first": "one", "second": "two"}
    # The stage ran three times (asked first, asked second, finished): STARTED thrice.
    started = Event.objects.filter(run=run, type=Event.Type.STARTED, stage="decide").count()
    assert started == 3


# --- (k) bulk answering ---------------------------------------------------------------------


def test_identical_gates_of_three_runs_are_answered_in_bulk_and_all_finish(workers, redis_conn):
    runs = [engine.start_run("gate-question", {}, actor="test") for _ in range(3)]
    start_worker(workers)
    gates = [wait_open_gate(run, "go") for run in runs]
    assert len({g.shape for g in gates}) == 1

    result = answers.answer_many(
        [g.pk for g in gates],
        {"decision": "approve", "notes": "all three"},
        shape=gates[0].shape,
        actor="ana",
        roles=OPERATOR,
    )

    assert result.skipped == [] and len(result.answered) == 3
    for run in runs:
        assert settled(run) == Run.Status.SUCCEEDED
        assert run.checkpoints.get(stage="decide").outputs["notes"] == "all three"
        assert [e.payload["by"] for e in answered(run)] == ["ana"]
        assert opened(run, "go") == 1


# --- (l) a quorum's deadline: a time-out is not a vote ----------------------------------------


def deadline_passed(gate: Gate) -> None:
    """The hour-long deadline moved into the past: the next sweep applies the time-out."""
    Gate.objects.filter(pk=gate.pk).update(deadline=Now())


def test_a_two_person_gate_without_votes_takes_its_default_at_the_deadline(workers, redis_conn):
    run = engine.start_run("gate-quorum-timeout", {}, actor="test")
    start_worker(workers)
    gate = wait_open_gate(run, "go")

    deadline_passed(gate)

    assert settled(run) == Run.Status.SUCCEEDED
    assert run.checkpoints.get(stage="decide").outputs == gp.DEFAULT_ANSWER
    [event] = answered(run)
    assert (event.payload["by"], event.payload["final"]) == (answers.TIME_OUT, True)
    # The time-out settled the gate on its own: a single vote after it completes nothing.
    bob = User.objects.create_user("bob").pk
    with pytest.raises(answers.AlreadyAnswered):
        answers.answer(gate.pk, gp.DEFAULT_ANSWER, actor="user:bob", roles=OPERATOR, user=bob)
    assert len(answered(run)) == 1
    assert opened(run, "go") == 1


def test_a_two_person_gate_with_one_vote_that_differs_takes_its_default_at_the_deadline(
    workers, redis_conn
):
    run = engine.start_run("gate-quorum-timeout", {}, actor="test")
    start_worker(workers)
    gate = wait_open_gate(run, "go")
    ana = User.objects.create_user("ana").pk
    vote = {"decision": "approve", "notes": "ana wants it"}
    answers.answer(gate.pk, vote, actor="user:ana", roles=OPERATOR, user=ana)

    deadline_passed(gate)

    assert settled(run) == Run.Status.SUCCEEDED
    assert run.checkpoints.get(stage="decide").outputs == gp.DEFAULT_ANSWER
    assert [(e.payload["by"], e.payload["final"]) for e in answered(run)] == [
        ("user:ana", False),
        (answers.TIME_OUT, True),
    ]


def test_two_different_people_settle_a_two_person_gate_and_the_stage_goes_on(workers, redis_conn):
    run = engine.start_run("gate-quorum", {}, actor="test")
    start_worker(workers)
    gate = wait_open_gate(run, "go")
    ana, bob = (User.objects.create_user(name).pk for name in ("ana", "bob"))
    vote = {"decision": "approve", "notes": "both of us"}

    answers.answer(gate.pk, vote, actor="user:ana", roles=OPERATOR, user=ana)
    with pytest.raises(answers.AnswerRefused, match="you answered already"):
        answers.answer(gate.pk, vote, actor="user:ana-by-token", roles=OPERATOR, user=ana)
    assert run_status(run) == Run.Status.WAITING
    answers.answer(gate.pk, vote, actor="user:bob", roles=OPERATOR, user=bob)

    assert settled(run) == Run.Status.SUCCEEDED
    assert run.checkpoints.get(stage="decide").outputs == vote
    assert [e.payload["user"] for e in answered(run)] == [ana, bob]


# --- (l) bulk never overwrites each run's own content, and bulk money needs the tick ---------


def bulk_post(gates: list[Gate], **answer: str) -> dict[str, str]:
    """What the group page posts for these gates: the gates shown with their digests, and
    the one answer over the values every gate shows alike (what the page prefills)."""
    return {
        "scope": "all",
        "shown": ",".join(str(g.pk) for g in gates),
        **{f"digest-{g.pk}": gate_digest(g) for g in gates},
        **{f"answer-{name}": value for name, value in shared(gates).initial.items()},
        **{f"answer-{name}": value for name, value in answer.items()},
    }


def test_a_bulk_review_of_three_runs_publishes_each_runs_own_article_and_bulk_charges_need_the_tick(
    workers, redis_conn, demo_service
):
    topics = ("gates", "leases", "plans")
    runs = []
    for topic in topics:
        ensure_topic(topic)
        runs.append(faults.start_run("content", {"review": "on", "topic": topic}, actor="test"))
    start_worker(workers)
    reviews = [wait_open_gate(run, "review") for run in runs]
    shape = reviews[0].shape
    operator = client_as("operator")

    page = operator.get(f"/runs/gate-groups/{shape}/").content.decode()
    assert "Answered run by run: title, body differ" in page
    response = operator.post(f"/runs/gate-groups/{shape}/answer/", bulk_post(reviews))
    assert response.status_code == 200

    charges = [wait_open_gate(run, "promote-charge") for run in runs]
    published = {a["title"]: a["content_hash"] for a in demo_service.articles()}
    assert published == {
        g.initial["title"]: content_hash(g.initial["title"], g.initial["body"]) for g in reviews
    }
    assert len(set(published.values())) == 3

    supervisor = client_as("supervisor")
    group = f"/runs/gate-groups/{charges[0].shape}/"
    page = supervisor.get(group).content.decode()
    assert '<td class="num total">3 charges, $15.00 in all</td>' in page
    untick = supervisor.post(f"{group}answer/", bulk_post(charges, decision="approve"))
    assert untick.status_code == 400
    assert answered(runs[0], "promote-charge") == []
    ticked = supervisor.post(f"{group}answer/", bulk_post(charges, **{TICK: "on"}))
    assert ticked.status_code == 200

    assert [settled(run) for run in runs] == [Run.Status.SUCCEEDED] * 3
    assert len(demo_service.charges()) == 3
    assert len(demo_service.articles()) == 3


# --- (m) the stage learns what the reviewer did ---------------------------------------------


def test_a_rejection_returned_as_the_result_lets_the_stage_go_on_with_the_feedback(
    workers, redis_conn, demo_service
):
    run = engine.start_run("gate-charge-learning", {}, actor="test")
    start_worker(workers)
    gate = wait_open_gate(run, "fee")

    answers.answer(
        gate.pk,
        {"decision": "reject", "reason": "the customer asked for a refund"},
        actor="sam",
        roles=SUPERVISOR,
        digest=gate_digest(gate),
    )

    assert settled(run) == Run.Status.SUCCEEDED
    outputs = run.checkpoints.get(stage="pay").outputs
    assert outputs["result"] == {
        "rejected": True,
        "by": "sam",
        "reason": "the customer asked for a refund",
    }
    assert outputs["review"]["decision"] == "reject"
    assert demo_service.charges() == []
    assert not Effect.objects.filter(run=run).exists()


def test_the_stage_learns_who_edited_the_call_and_what_they_changed(
    workers, redis_conn, demo_service
):
    run = engine.start_run("gate-charge-learning", {}, actor="test")
    start_worker(workers)
    gate = wait_open_gate(run, "fee")

    answers.answer(
        gate.pk,
        {"decision": "approve", "arg_amount": "3.50", TICK: "on"},
        actor="sam",
        roles=SUPERVISOR,
        digest=gate_digest(gate),
    )

    assert settled(run) == Run.Status.SUCCEEDED
    review = run.checkpoints.get(stage="pay").outputs["review"]
    assert (review["decision"], review["by"]) == ("approve", "sam")
    assert review["edits"] == {"amount": [gp.FEE, "3.50"]}
    assert review["at"]
    [charge] = demo_service.charges()
    assert charge["amount"] == "3.50"


# --- (l) typed edits ------------------------------------------------------------------------


def meeting_gate(workers: Workers) -> Gate:
    """A gate-meeting run waiting for its meeting's confirmation, its worker started."""
    run = engine.start_run("gate-meeting", {}, actor="test")
    start_worker(workers)
    return wait_open_gate(run, "meeting")


def delivered(gate: Gate) -> tuple[Effect, list[dict]]:
    """Once the run ended: the meeting's effect, and what the calendar received under its key."""
    assert settled(gate.run) == Run.Status.SUCCEEDED
    effect = Effect.objects.get(run=gate.run, call_id="meeting")
    return effect, gp.meetings(effect.delivery_key)


def unedited_key(gate: Gate) -> str:
    return gp.meeting_key(_Root(gate.run.root.public_id), gate.call["args"]).key


def assert_no_edit(gate: Gate) -> None:
    """Approved as asked: no diff, the answer's arguments those asked, the original key, and
    the calendar holds the attendees as the list they were."""
    effect, sent = delivered(gate)
    gate.refresh_from_db()
    assert gate.diff == {}
    [event] = answered(gate.run, "meeting")
    assert event.payload["diff"] == {}
    assert event.payload["answer"]["args"] == gate.call["args"]
    assert effect.delivery_key == unedited_key(gate)
    assert [m["attendees"] for m in sent] == [gp.ATTENDEES]


def test_an_untouched_list_approved_on_the_dashboard_is_sent_as_the_list_with_no_edit(
    workers, redis_conn
):
    gate = meeting_gate(workers)
    supervisor = client_as("supervisor")
    action = reverse("runs:gate_answer", args=[gate.run_id, gate.pk])
    page = supervisor.get(reverse("runs:gate", args=[gate.run_id, gate.pk])).content.decode()
    shown = form_values(page, action)
    assert shown["decision"] == "approve" and shown["arg_attendees"].startswith("[")

    # The reviewer ticks the act the approval names, and changes nothing else.
    response = supervisor.post(action, shown | {TICK: "on"})

    assert response.status_code == 302
    assert_no_edit(gate)


def test_an_untouched_list_approved_through_the_api_is_sent_as_the_list_with_no_edit(
    workers, redis_conn
):
    gate = meeting_gate(workers)

    response = api_as("operator").post(
        f"/api/v1/gates/{gate.pk}/answer",
        {"answer": dict(gate.initial) | {TICK: True}, "digest": gate_digest(gate)},
        content_type="application/json",
    )

    assert response.status_code == 200
    assert_no_edit(gate)


def test_a_list_edited_through_the_api_arrives_at_the_calendar_as_a_list(workers, redis_conn):
    gate = meeting_gate(workers)
    wanted = ["pm@client.com", "ana@company.com"]

    response = api_as("operator").post(
        f"/api/v1/gates/{gate.pk}/answer",
        {
            "answer": {"decision": "approve", TICK: True, "arg_attendees": wanted},
            "digest": gate_digest(gate),
        },
        content_type="application/json",
    )

    assert response.status_code == 200
    effect, sent = delivered(gate)
    assert [m["attendees"] for m in sent] == [wanted]
    assert effect.request["attendees"] == wanted
    assert effect.delivery_key != unedited_key(gate)
    [event] = answered(gate.run, "meeting")
    assert event.payload["diff"] == {"attendees": [gp.ATTENDEES, wanted]}


def test_an_edited_amount_is_charged_and_is_what_the_ledger_plan_run_page_and_verdict_say(
    workers, redis_conn, demo_service
):
    # The worker dies between the confirmation's answer and the charge: the resume's plan,
    # its contract and the verdict price the edited call.
    run = reviewed_run(workers, crash="publish/promote-charge/after-answer")
    doomed = workers.procs[-1]
    approve_review(run)
    approve_charge(run, arg_amount="20.00")
    doomed.wait(timeout=SLOW)
    assert doomed.returncode == -signal.SIGKILL
    start_worker(workers, "healthy")
    wait_for(lambda: run_status(run) == Run.Status.INTERRUPTED, timeout=SLOW, what="interrupted")

    plan = compute_plan(run)
    [line] = [e for e in plan.effects if e.call_id == "promote-charge"]
    assert (line.action, line.cost) == ("call", "20.00")
    assert line.edited == "amount 5.00 → 20.00, by sam (asked at $5.00)"
    assert plan.cost_resume.money == "20.0000"
    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:op")

    assert settled(run) == Run.Status.SUCCEEDED
    [charge] = demo_service.charges()
    effect = run.effects.get(call_id="promote-charge")
    assert charge["amount"] == effect.request["amount"] == "20.00"
    assert charge["delivery_key"] == effect.delivery_key
    assert effect.cost == Decimal("20.00")
    html = client_as("viewer").get(f"/runs/{run.public_id}/").content.decode()
    assert "Plan kept: 1 call, $20.00, as approved" in html
    row = html[html.index("promote-charge", html.index('id="effects"')) :]
    row = row[: row.index("</tr>")]
    assert "edited: amount 5.00 → 20.00, by sam (asked at $5.00)" in row and "$20.00" in row

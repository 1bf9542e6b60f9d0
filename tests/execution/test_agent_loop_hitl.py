"""ctx.converse on real workers against the demo service's scripted model (issue 45): a
final-answer tool ends a loop that must call a tool every turn, a reviewer's rejection and
edit reach the model, a question waits with no worker held and its answer reaches the model,
an invalid structured answer is asked again. What the model was sent is read from the
recorded turns (each turn's effect keeps its request); nothing asserts on time."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.db.models.functions import Now

from runs import engine, enqueue
from runs.gates import answers
from runs.models import Effect, Event, Lease, Run
from tests.execution import loop_pipelines as lp
from tests.support.pipelines import registered
from tests.support.processes import Workers, wait_for
from tests.support.state import run_status, wait_open_gate

pytestmark = [pytest.mark.workers, pytest.mark.django_db(transaction=True)]

WORKER_PIPELINES = ",".join(["demo.pipeline.content_pipeline", *lp.PATHS])
OPERATOR = frozenset({"operator"})
SLOW = 180
ANA = {"to": "ana@example.com", "subject": "Re: lunch", "body": "Yes."}


@pytest.fixture(autouse=True)
def loop_pipelines(settings) -> Iterator[None]:
    with registered(settings, *lp.PATHS):
        yield


def start(workers: Workers, demo_service, pipeline: str, steps: list[dict]) -> Run:
    model = demo_service.script(pipeline, steps)
    run = engine.start_run(f"loop-{pipeline}", {"model": model}, actor="test")
    workers.start(pipeline, env={"RESUMER_PIPELINES": WORKER_PIPELINES})
    return run


def settled(run: Run) -> Run:
    wait_for(
        lambda: run_status(run) in (*Run.TERMINAL, *Run.RESUMABLE),
        timeout=SLOW,
        what=f"{run.public_id} to end",
    )
    run.refresh_from_db()
    return run


def sent(run: Run, turn: int) -> list[dict]:
    """The messages the model was sent at this turn."""
    return Effect.objects.get(run=run, call_id=f"turn-{turn}").request["messages"]


def outputs(run: Run) -> dict:
    return run.checkpoints.get(stage="agent").outputs


def test_a_loop_that_must_call_a_tool_ends_on_its_final_answer_tool(workers, demo_service):
    run = start(
        workers,
        demo_service,
        "required",
        [
            {"tool_calls": [{"name": "weather", "arguments": {"city": "Lyon"}}]},
            {"tool_calls": [{"name": "Done", "arguments": {"summary": "Clear: walk the hill."}}]},
        ],
    )

    assert settled(run).status == Run.Status.SUCCEEDED
    assert outputs(run) == {
        "final": '{"summary": "Clear: walk the hill."}',
        "output": {"summary": "Clear: walk the hill."},
        "turns": 2,
        "calls": ["weather-1"],
    }
    turns = Effect.objects.filter(run=run, tool="model").order_by("id")
    assert [(t.call_id, t.request["tool_choice"]) for t in turns] == [
        ("turn-1", "required"),
        ("turn-2", "required"),
    ]
    assert sent(run, 1)[0]["content"].startswith("You plan trips.")


def test_a_rejection_with_feedback_reaches_the_model_and_the_loop_goes_on(workers, demo_service):
    run = start(
        workers,
        demo_service,
        "reviewed",
        [
            {"tool_calls": [{"name": "send_mail", "arguments": ANA}]},
            {"tool_calls": [{"name": "send_mail", "arguments": {**ANA, "body": "Yes, at 1."}}]},
            {"content": "Sent."},
        ],
    )
    gate = wait_open_gate(run, "send_mail-1")
    reject = {"decision": "reject", "reason": "Too curt: say when."}
    answers.answer(gate.pk, reject, actor="user:ana", roles=OPERATOR)
    gate = wait_open_gate(run, "send_mail-2")
    answers.answer(gate.pk, {"decision": "approve"}, actor="user:ana", roles=OPERATOR)

    assert settled(run).status == Run.Status.SUCCEEDED
    told = json.loads(sent(run, 2)[-1]["content"])
    assert told == {"rejected": True, "by": "user:ana", "reason": "Too curt: say when."}
    assert [m["body"] for m in demo_service.mail()] == ["Yes, at 1."]
    assert outputs(run)["final"] == "Sent."


def test_an_edit_is_reported_to_the_model_with_the_call_made_as_edited(workers, demo_service):
    run = start(
        workers,
        demo_service,
        "reviewed",
        [{"tool_calls": [{"name": "send_mail", "arguments": ANA}]}, {"content": "Sent."}],
    )
    gate = wait_open_gate(run, "send_mail-1")
    edit = {"decision": "approve", "arg_body": "Yes, at one.", "reason": "Say when."}
    answers.answer(gate.pk, edit, actor="user:ana", roles=OPERATOR)

    assert settled(run).status == Run.Status.SUCCEEDED
    told = json.loads(sent(run, 2)[-1]["content"])
    assert told["reviewer"] == {
        "by": "user:ana",
        "edited": {"body": {"asked": "Yes.", "sent": "Yes, at one."}},
        "notes": "Say when.",
    }
    assert told["result"]["sent"] is True
    assert [m["body"] for m in demo_service.mail()] == ["Yes, at one."]


def test_a_question_waits_with_no_worker_held_and_its_answer_reaches_the_model(
    workers, demo_service, redis_conn
):
    run = start(
        workers,
        demo_service,
        "question",
        [
            {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Which day?"}}]},
            {"content": "Booked for Tuesday."},
        ],
    )
    gate = wait_open_gate(run, "ask_human-1")
    wait_for(
        lambda: Lease.objects.filter(run=run, holder="", expires_at__lte=Now()).exists(),
        timeout=SLOW,
        what="the lease let go",
    )

    queue = enqueue.queue()
    # The stage's job ends once it has opened the gate; RQ takes it out of its started
    # registry just after the run says WAITING, so that is waited for (a job that held a
    # worker for the answer never leaves it), and nothing may be queued behind it.
    wait_for(
        lambda: not queue.started_job_registry.get_job_ids(),
        timeout=SLOW,
        what="the stage's job ended",
    )
    assert (gate.question, run_status(run)) == ("Which day?", Run.Status.WAITING)
    assert not queue.job_ids
    answers.answer(gate.pk, {"answer": "Tuesday"}, actor="user:ana", roles=OPERATOR)

    assert settled(run).status == Run.Status.SUCCEEDED
    assert json.loads(sent(run, 2)[-1]["content"]) == {"answer": "Tuesday"}
    assert outputs(run)["final"] == "Booked for Tuesday."


def test_an_invalid_structured_answer_is_asked_again_once_and_validated(workers, demo_service):
    run = start(
        workers,
        demo_service,
        "structured",
        [{"invalid": True}, {"json": {"label": "respond", "reason": "a question"}}],
    )

    assert settled(run).status == Run.Status.SUCCEEDED
    assert outputs(run)["output"] == {"label": "respond", "reason": "a question"}
    again = sent(run, 2)[-1]
    assert again["role"] == "user"
    assert again["content"].startswith("Your answer does not match the required output (label:")
    assert Effect.objects.filter(run=run, tool="model").count() == 2


def test_a_structured_answer_invalid_after_its_retry_fails_the_stage_saying_so(
    workers, demo_service
):
    run = start(workers, demo_service, "structured", [{"invalid": True}, {"invalid": True}])

    assert settled(run).status == Run.Status.FAILED
    failed = Event.objects.filter(run=run, type=Event.Type.FAILED).get()
    assert "did not validate after 1 retries" in failed.payload["error"]

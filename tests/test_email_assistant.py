"""The email assistant of examples/email_assistant.py (issue 45): a module outside runs/ and
demo/, registered only through RESUMER_PIPELINES and PYTHONPATH, run end to end by a real
worker against the demo service's scripted model and its mail and calendar. Ana confirms the
meeting (shortening it), answers the model's question and confirms the reply; each answer
reaches the model, and each act reaches the target once."""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runs import engine
from runs.gates import answers
from runs.models import Checkpoint, Effect, Event, Gate, GateStatus, Run
from runs.pipeline import registry
from tests.support.processes import wait_for
from tests.support.state import run_status

pytestmark = [pytest.mark.workers, pytest.mark.django_db(transaction=True)]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PIPELINE = "email_assistant.pipeline"
OPERATOR = frozenset({"operator"})
SLOW = 180
BO = "bo@example.com"
TRIAGE = [{"json": {"classification": "respond", "reasoning": "Bo asks for a meeting."}}]
MEETING = {
    "attendees": [BO],
    "subject": "Launch plan",
    "day": "2030-01-08",
    "start_time": "14:00",
    "duration_minutes": 60,
}
REPLY = {"to": BO, "subject": "Re: Tuesday?", "content": "Tuesday at 14:00 works; slides attached."}
RESPOND = [
    {"tool_calls": [{"name": "check_calendar", "arguments": {"day": "2030-01-08"}}]},
    {"tool_calls": [{"name": "schedule_meeting", "arguments": MEETING}]},
    {"tool_calls": [{"name": "Question", "arguments": {"question": "Send Bo the slides?"}}]},
    {"tool_calls": [{"name": "write_email", "arguments": REPLY}]},
    {"tool_calls": [{"name": "Done", "arguments": {"done": True}}]},
]


@pytest.fixture
def assistant(workers, demo_service, settings, monkeypatch) -> Iterator[dict[str, str]]:
    """The example registered here and, through the environment only, in the workers."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    settings.RESUMER_PIPELINES = [PIPELINE]
    registry._pipelines = None
    yield {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")])),
        "RESUMER_PIPELINES": PIPELINE,
        "RESUMER_CALL_HOOKS": "",
        "EMAIL_API_URL": demo_service.url,
        "MODEL_BASE_URL": f"{demo_service.url}/v1",
    }
    registry._pipelines = None
    sys.modules.pop("email_assistant", None)


def answer_when_asked(run: Run, gate_id: str, data: dict) -> None:
    gate = wait_for(
        lambda: (
            run_status(run) == Run.Status.WAITING
            and Gate.objects.filter(run=run, gate_id=gate_id, status=GateStatus.OPEN).first()
        ),
        timeout=SLOW,
        what=f"{run.public_id} to ask {gate_id}",
    )
    answers.answer(gate.pk, data, actor="user:ana", roles=OPERATOR)


def told(run: Run, tool_call: str) -> dict:
    """What the model was told a call of the respond loop came to, in its last turn."""
    [*_, last] = Effect.objects.filter(run=run, stage="respond", tool="model").order_by("id")
    messages = last.request["messages"]
    calls = {
        c["id"]: c["function"]["name"]
        for m in messages
        if m["role"] == "assistant"
        for c in m.get("tool_calls", [])
    }
    [said] = [
        json.loads(m["content"])
        for m in messages
        if m["role"] == "tool" and calls[m["tool_call_id"]] == tool_call
    ]
    return said


def test_the_email_assistant_runs_end_to_end_with_ana_in_the_loop(assistant, workers, demo_service):
    demo_service.schedule({**MEETING, "subject": "Standup", "start_time": "09:00"})
    model = demo_service.script("assistant", conversations=[TRIAGE, RESPOND])
    run = engine.start_run(
        "email-assistant",
        {"model": model, "author": BO, "subject": "Tuesday?", "body": "Can we meet?"},
        actor="test",
    )
    workers.start("assistant", env=assistant)

    answer_when_asked(
        run, "schedule_meeting-1", {"decision": "approve", "arg_duration_minutes": "30"}
    )
    answer_when_asked(run, "Question-1", {"answer": "Yes, attach them."})
    answer_when_asked(run, "write_email-1", {"decision": "approve"})

    wait_for(lambda: run_status(run) in Run.TERMINAL, timeout=SLOW, what="the run to end")
    assert run_status(run) == Run.Status.SUCCEEDED
    assert Checkpoint.objects.get(run=run, stage="respond").outputs == {
        "answered": True,
        "calls": ["check_calendar-1", "schedule_meeting-1", "Question-1", "write_email-1"],
    }
    assert told(run, "check_calendar")["meetings"][0]["subject"] == "Standup"
    assert told(run, "schedule_meeting")["reviewer"]["edited"] == {
        "duration_minutes": {"asked": 60, "sent": 30}
    }
    assert told(run, "Question") == {"answer": "Yes, attach them."}
    made = [m for m in demo_service.meetings() if m["delivery_key"]]
    assert [(m["subject"], m["duration_minutes"]) for m in made] == [("Launch plan", 30)]
    assert [(m["to"], m["body"]) for m in demo_service.mail()] == [(BO, REPLY["content"])]
    # Each gate's answer ran the loop again, on the calendar it had read and the turns it
    # had: every model turn made once (one effect per call id), no divergence.
    turns = Effect.objects.filter(run=run, stage="respond", tool="model")
    assert turns.count() == len(set(turns.values_list("call_id", flat=True)))
    assert not Event.objects.filter(run=run, type=Event.Type.DIVERGED).exists()


def test_the_agent_is_at_most_half_a_hand_written_loop_and_writes_no_json_schema(assistant):
    import email_assistant

    agent = [email_assistant.email_text, email_assistant.triage, email_assistant.respond]
    lines = sum(len(inspect.getsourcelines(function)[0]) for function in agent)
    assert lines <= 82 // 2
    source = Path(email_assistant.__file__).read_text()
    assert '"properties"' not in source and '"parameters"' not in source


def test_a_worker_killed_mid_loop_after_the_answers_is_resumed_and_keeps_its_plan(
    assistant, workers, demo_service
):
    from demo import faults
    from runs.planning.planner import compute_plan
    from runs.planning.replay import Action
    from runs.planning.resume import approve

    model = demo_service.script("assistant-crash", conversations=[TRIAGE, RESPOND])
    run = faults.start_run(
        "email-assistant",
        {"model": model, "author": BO, "subject": "Tuesday?", "body": "Can we meet?"},
        actor="test",
        # The fourth turn (the reply's draft) is billed, its answer never recorded.
        faults={"crash": "respond/turn-4/after"},
    )
    env = {**assistant, "RESUMER_CALL_HOOKS": "demo.faults.FaultHooks", "RESUMER_FAULTS": "1"}
    doomed = workers.start("doomed", env=env)
    answer_when_asked(run, "schedule_meeting-1", {"decision": "approve"})
    answer_when_asked(run, "Question-1", {"answer": "Yes, attach them."})
    doomed.wait(timeout=SLOW)
    workers.start("healthy", env=env)
    wait_for(lambda: run_status(run) == Run.Status.INTERRUPTED, timeout=SLOW, what="interrupted")
    run.refresh_from_db()
    plan = compute_plan(run)
    actions = {line.call_id: line.action for line in plan.effects if line.stage == "respond"}
    assert actions["turn-4"] == Action.RETRY_SAME_KEY
    assert {actions[f"turn-{n}"] for n in (1, 2, 3)} == {Action.REUSE}
    assert actions["check_calendar-1"] == Action.REPLAY
    billed = {k: demo_service.count("chat", k) for k in completion_keys(run)}

    approve(run, "strict", plan.fingerprint, actor="user:op")
    answer_when_asked(run, "write_email-1", {"decision": "approve"})
    wait_for(lambda: run_status(run) in Run.TERMINAL, timeout=SLOW, what="the run to end")

    assert run_status(run) == Run.Status.SUCCEEDED
    assert Event.objects.filter(run=run, type=Event.Type.PLAN_KEPT).count() == 1
    assert not Event.objects.filter(run=run, type=Event.Type.PLAN_DEVIATED).exists()
    # No completed turn billed again; the one in flight at the kill once more, as planned.
    after = {k: demo_service.count("chat", k) for k in completion_keys(run)}
    turn_4 = Effect.objects.get(run=run, stage="respond", call_id="turn-4").delivery_key
    assert {k: after[k] - billed.get(k, 0) for k in after if after[k] != billed.get(k, 0)} == {
        turn_4: 1,
        **{k: 1 for k in after if k not in billed},  # turn-5, made only after the resume
    }
    assert len(demo_service.mail()) == 1
    assert len([m for m in demo_service.meetings() if m["delivery_key"]]) == 1


def completion_keys(run: Run) -> list[str]:
    return list(Effect.objects.filter(run=run, tool="model").values_list("delivery_key", flat=True))

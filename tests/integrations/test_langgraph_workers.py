"""The LangGraph adapter (runs/integrations/langgraph/) on real workers, with LangGraph's own
ToolNode: a turn that asks two tools at once, a durable tool confirmed by a person, and the
graph run again after the answer on what it recorded."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from runs import engine
from runs.events import read
from runs.gates import answers
from runs.models import Effect, Event, Gate, GateStatus, ReplayPolicy, Run
from tests.integrations import langgraph_pipelines as lp
from tests.support.pipelines import registered
from tests.support.processes import wait_for
from tests.support.state import run_status

pytestmark = [pytest.mark.workers, pytest.mark.django_db(transaction=True)]

WORKER_PIPELINES = f"demo.pipeline.content_pipeline,{lp.PATH},{lp.ASKING_TOOL}"
SLOW = 180
TURNS = [
    {
        "tool_calls": [
            {"name": "weather", "arguments": {"city": "Lyon"}},
            {"name": "weather", "arguments": {"city": "Paris"}},
        ]
    },
    {
        "tool_calls": [
            {"name": "send_mail", "arguments": {"to": "ana@example.com", "body": "Sunny."}}
        ]
    },
    {"content": "Mailed."},
]


@pytest.fixture(autouse=True)
def react(settings) -> Iterator[None]:
    with registered(settings, lp.PATH, lp.ASKING_TOOL):
        yield


def results(run: Run, call_id: str) -> list:
    """What each TOOL_RESULT of this call recorded, and whether it was a replay (which
    records no result: the first one's is handed back)."""
    events = Event.objects.filter(run=run, type=Event.Type.TOOL_RESULT).order_by("seq")
    said = [read(e) for e in events]
    return [(s.result, s.replayed) for s in said if s.call == call_id]


def test_parallel_tool_calls_keep_their_ids_and_a_confirmed_call_is_made_once(
    workers, demo_service
):
    model = demo_service.script("react", TURNS)
    run = engine.start_run("langgraph-react", {"model": model}, actor="test")
    workers.start("react", env={"RESUMER_PIPELINES": WORKER_PIPELINES})

    gate = wait_for(
        lambda: Gate.objects.filter(run=run, gate_id="send_mail-1", status=GateStatus.OPEN).first(),
        timeout=SLOW,
        what="the mail's confirmation",
    )
    edit = {"decision": "approve", "arg_body": "Sunny in both.", "confirm_act": True}
    answers.answer(gate.pk, edit, actor="user:ana", roles=frozenset({"supervisor"}))
    wait_for(lambda: run_status(run) in Run.TERMINAL, timeout=SLOW, what="the run to end")

    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    # Numbered in the order the model asked, whichever pool thread ran each: made once,
    # replayed when the graph ran again after the answer.
    assert results(run, "weather-1") == [({"output": "clear in Lyon"}, False), (None, True)]
    assert results(run, "weather-2") == [({"output": "clear in Paris"}, False), (None, True)]
    [mail] = Effect.objects.filter(run=run, tool="send_mail")
    assert mail.policy == ReplayPolicy.NEVER
    assert [(m["to"], m["body"]) for m in demo_service.mail()] == [
        ("ana@example.com", "Sunny in both.")
    ]
    turns = Effect.objects.filter(run=run, tool="model").order_by("id")
    assert list(turns.values_list("call_id", flat=True)) == ["turn-1", "turn-2", "turn-3"]
    told = [m["content"] for m in turns.last().request["messages"] if m["role"] == "tool"]
    [sent] = demo_service.mail()
    assert told == ["clear in Lyon", "clear in Paris", json.dumps({"sent": sent["id"]})]


def test_an_interrupt_inside_a_durable_tool_is_refused_with_nothing_sent(workers):
    run = engine.start_run("langgraph-asking-tool", {}, actor="test")
    workers.start("asking", env={"RESUMER_PIPELINES": WORKER_PIPELINES})
    wait_for(lambda: run_status(run) in Run.RESUMABLE, timeout=SLOW, what="the run to stop")

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    [booked] = Effect.objects.filter(run=run, tool="book_hotel")
    assert booked.status == Effect.Status.FAILED  # refused: known not to have happened
    failed = Event.objects.get(run=run, type=Event.Type.FAILED)
    assert "interrupt() inside a durable tool is not supported" in read(failed).error

"""LangGraph's customer support email agent (examples/langgraph_support.py: the LangGraph
docs' "Thinking in LangGraph" graph, its chat model ChatResumer, its two side effects durable
tools, its interrupt() a Resumer gate) on real workers, against the demo service's scripted
model and mail: killed mid-graph and strictly resumed, its review answered on the gate page
and through the API after the worker that asked it died. The mail service's own outbox and
the model's meter say what happened, once."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.urls import reverse

from demo import faults
from runs.gates import answers
from runs.gates.decision import gate_digest
from runs.models import Checkpoint, Effect, Event, Gate, Run
from runs.pipeline import registry
from runs.planning.planner import Action, compute_plan
from runs.planning.resume import approve
from tests.support.processes import Workers, wait_for
from tests.support.state import run_status, wait_open_gate
from tests.support.web import api_as, client_as, form_values

pytestmark = [pytest.mark.workers, pytest.mark.django_db(transaction=True)]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PIPELINE = "langgraph_support.pipeline"
OPERATOR = frozenset({"operator"})
SLOW = 180
CUSTOMER = "ana@customer.example"
EMAIL = "The export feature crashes when I select PDF format. We ship tomorrow!"
CLASSIFIED = {"intent": "bug", "urgency": "high", "topic": "PDF export", "summary": "PDF crash"}
DRAFT = "Sorry about the crash: we filed it and will write when it is fixed."
EDITED = "Sorry about the PDF crash: bug filed, fix expected this week."
GATE = "human_review.interrupt-1"
CALLS = ["turn-1", "file_bug-1", "turn-2", "send_email-1"]


@pytest.fixture
def support(workers, demo_service, settings, monkeypatch) -> Iterator[dict[str, str]]:
    """The example registered here and, through the environment only, in the workers (with
    the demo pipeline, whose fault hooks a crash needs)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    settings.RESUMER_PIPELINES = [PIPELINE]
    registry._pipelines = None
    yield {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")])),
        "RESUMER_PIPELINES": f"demo.pipeline.content_pipeline,{PIPELINE}",
        "SUPPORT_API_URL": demo_service.url,
        "MODEL_BASE_URL": f"{demo_service.url}/v1",
    }
    registry._pipelines = None
    sys.modules.pop("langgraph_support", None)


def start(demo_service, crash: str = "") -> Run:
    """A bug report, classified and drafted by the scripted model (one conversation each:
    the classification asked as JSON of its schema, the draft as text)."""
    model = demo_service.script(
        "support", conversations=[[{"json": CLASSIFIED}], [{"content": DRAFT}]]
    )
    inputs = {"model": model, "email_content": EMAIL, "sender_email": CUSTOMER}
    return faults.start_run(
        "langgraph-support", inputs, actor="test", faults={"crash": crash} if crash else {}
    )


def approve_review(run: Run) -> None:
    gate = wait_open_gate(run, GATE)
    answer = {"approved": True, "edited_response": EDITED}
    answers.answer(gate.pk, answer, actor="user:ana", roles=OPERATOR)


def ended(run: Run) -> Run:
    wait_for(lambda: run_status(run) in Run.TERMINAL, timeout=SLOW, what="the run to end")
    run.refresh_from_db()
    return run


def killed(workers: Workers, doomed) -> None:
    doomed.wait(timeout=SLOW)
    assert doomed.returncode == -signal.SIGKILL


def billed(demo_service, run: Run, call_id: str) -> int:
    """How many completions the model's own meter billed for this turn's key."""
    key = Effect.objects.get(run=run, call_id=call_id).delivery_key
    return demo_service.count("chat", key)


def assert_each_act_once(demo_service, run: Run) -> None:
    mail = demo_service.mail()
    assert sorted((m["to"], m["body"]) for m in mail) == sorted(
        [("bugs@tracker.example", CLASSIFIED["summary"]), (CUSTOMER, EDITED)]
    )
    assert len({m["delivery_key"] for m in mail}) == 2
    outputs = Checkpoint.objects.get(run=run, stage="support").outputs
    assert outputs["classification"] == CLASSIFIED
    assert outputs["draft_response"] == EDITED


@pytest.mark.parametrize(
    ("crash", "expected"),
    [
        # After the reply's intent (the review answered, the graph replayed up to it): the
        # resume sends it once, under its key, and asks the model nothing.
        (
            "support/send_email-1/before",
            {"turn-1": Action.REUSE, "turn-2": Action.REUSE, "send_email-1": "retry-same-key"},
        ),
        # While the draft's turn was in flight (made, its answer not recorded): retried under
        # its own key; the classification's turn, completed, is reused.
        ("support/turn-2/after", {"turn-1": Action.REUSE, "turn-2": Action.RETRY_SAME_KEY}),
    ],
)
def test_the_graph_killed_mid_loop_resumes_strictly_and_acts_once(
    support, workers, demo_service, crash, expected
):
    run = start(demo_service, crash)
    doomed = workers.start("doomed", env=support)
    if crash.startswith("support/send_email"):
        approve_review(run)
    killed(workers, doomed)
    workers.start("healthy", env=support)
    wait_for(lambda: run_status(run) == Run.Status.INTERRUPTED, timeout=SLOW, what="interrupted")
    run.refresh_from_db()

    plan = compute_plan(run)
    planned = {e.call_id: e.action for e in plan.effects}
    assert {call: planned[call] for call in expected} == expected
    approve(run, "strict", plan.fingerprint, actor="test")
    if crash.startswith("support/turn-2"):
        approve_review(run)

    assert ended(run).status == Run.Status.SUCCEEDED
    assert Event.objects.filter(run=run, type=Event.Type.PLAN_KEPT).exists()
    assert not Event.objects.filter(run=run, type=Event.Type.DIVERGED).exists()
    assert_each_act_once(demo_service, run)
    assert billed(demo_service, run, "turn-1") == 1  # completed before the crash: reused
    in_flight = 2 if crash.startswith("support/turn-2") else 1  # may be billed twice, said so
    assert billed(demo_service, run, "turn-2") == in_flight
    made = Effect.objects.filter(run=run).order_by("id").values_list("call_id", flat=True)
    assert list(made) == CALLS


def answer_on_the_page(gate: Gate) -> int:
    operator = client_as("operator")
    action = reverse("runs:gate_answer", args=[gate.run_id, gate.pk])
    page = operator.get(reverse("runs:gate", args=[gate.run_id, gate.pk])).content.decode()
    shown = form_values(page, action)
    assert shown["edited_response"] == DRAFT  # the draft the interrupt showed, to edit
    assert "Please review and approve/edit this response" in page
    return operator.post(action, shown | {"approved": "on", "edited_response": EDITED}).status_code


def answer_through_the_api(gate: Gate) -> int:
    return (
        api_as("operator")
        .post(
            f"/api/v1/gates/{gate.pk}/answer",
            {
                "answer": {"approved": True, "edited_response": EDITED},
                "digest": gate_digest(gate),
            },
            content_type="application/json",
        )
        .status_code
    )


@pytest.mark.parametrize(
    ("face", "status"), [(answer_on_the_page, 302), (answer_through_the_api, 200)]
)
def test_the_review_interrupt_is_answered_on_a_gate_after_its_worker_died(
    support, workers, demo_service, face, status
):
    run = start(demo_service)
    asker = workers.start("asker", env=support)
    gate = wait_open_gate(run, GATE)
    assert gate.initial == {"edited_response": DRAFT}
    asker.kill()  # the run waits with no worker: nothing holds it
    asker.wait(timeout=SLOW)

    assert face(gate) == status
    workers.start("after", env=support)

    assert ended(run).status == Run.Status.SUCCEEDED
    assert_each_act_once(demo_service, run)
    assert billed(demo_service, run, "turn-1") == billed(demo_service, run, "turn-2") == 1
    [answered] = Gate.objects.filter(run=run, gate_id=GATE)
    assert answered.answer["approved"] is True

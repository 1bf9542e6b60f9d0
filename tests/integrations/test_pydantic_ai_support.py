"""Pydantic AI's bank support agent (examples/pydantic_ai_support.py) as a Resumer stage, on
real workers against the demo service's scripted model and its outbox (issue 46): a worker
killed mid-loop, after the card-blocking call went out and while a model turn was in flight,
is strictly resumed and ends PLAN_KEPT, the card blocked once and no completed turn billed
twice; the SDK's approval (requires_approval=True) is a Resumer confirmation that waits
through a worker's restart, answered on the gate page and, as a denial, by the API; a
reviewer's edit (tests/integrations/pydantic_ai_pipelines.py) is what the target gets and
what the model is told."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.urls import reverse

from demo import faults
from runs import engine
from runs.gates import answers
from runs.gates.decision import gate_digest
from runs.models import Checkpoint, Effect, Event, Gate, Run
from runs.pipeline import registry
from runs.planning.planner import compute_plan
from runs.planning.resume import approve
from tests.support.processes import wait_for
from tests.support.state import run_status, wait_open_gate
from tests.support.web import api_as, client_as, form_values

pytestmark = [pytest.mark.workers, pytest.mark.django_db(transaction=True)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PIPELINE = "pydantic_ai_support.pipeline"
# The same agent, its card block editable (imported once the example is on the path).
EDITS = "tests.integrations.pydantic_ai_pipelines.edits"
OPERATOR = frozenset({"operator"})
SLOW = 180
CARDS = "cards@bank.example"
ADVICE = {"support_advice": "John, your card is blocked.", "block_card": True, "risk": 8}
STEPS = [
    {"tool_calls": [{"name": "customer_balance", "arguments": {"include_pending": True}}]},
    {"tool_calls": [{"name": "block_card", "arguments": {"reason": "John lost his card."}}]},
    {"tool_calls": [{"name": "final_result", "arguments": ADVICE}]},
]


@pytest.fixture
def support(workers, demo_service, settings, monkeypatch) -> Iterator[dict[str, str]]:
    """The example registered here and, through the environment only, in the workers, with
    fault injection on (RESUMER_FAULTS: the example knows nothing of the demo)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    settings.RESUMER_PIPELINES = [PIPELINE, EDITS]
    registry._pipelines = None
    yield {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")])),
        "RESUMER_PIPELINES": f"{PIPELINE},{EDITS}",
        "RESUMER_FAULTS": "1",
        "RESUMER_CALL_HOOKS": "demo.faults.FaultHooks",
        "SUPPORT_API_URL": demo_service.url,
        "MODEL_BASE_URL": f"{demo_service.url}/v1",
    }
    registry._pipelines = None
    sys.modules.pop("pydantic_ai_support", None)
    sys.modules.pop("tests.integrations.pydantic_ai_pipelines", None)


def approve_block(run: Run) -> None:
    gate = wait_open_gate(run, "block_card-1")
    answers.answer(gate.pk, {"decision": "approve"}, actor="user:ana", roles=OPERATOR)


def ended(run: Run) -> Run:
    wait_for(lambda: run_status(run) in Run.TERMINAL, timeout=SLOW, what="the run to end")
    run.refresh_from_db()
    return run


def blocked(demo_service) -> list[dict]:
    """What the card team received: one mail per card blocked."""
    return [m for m in demo_service.mail() if m["to"] == CARDS]


def told(run: Run, tool: str) -> str:
    """What the model was told `tool` came to, in the run's last model turn."""
    [*_, last] = Effect.objects.filter(run=run, stage="support", tool="model").order_by("id")
    messages = last.request["messages"]
    ids = {
        c["id"]
        for m in messages
        if m["role"] == "assistant"
        for c in m.get("tool_calls", [])
        if c["function"]["name"] == tool
    }
    [said] = [m["content"] for m in messages if m["role"] == "tool" and m["tool_call_id"] in ids]
    return said


@pytest.mark.parametrize(
    ("point", "in_flight"),
    [
        # The card team's mail went out; the worker died before its outcome was recorded.
        ("support/block_card-1/after", ""),
        # The model answered turn 2; the worker died before the answer was recorded.
        ("support/turn-2/after", "turn-2"),
    ],
)
def test_a_worker_killed_mid_loop_is_resumed_strictly_and_blocks_the_card_once(
    support, workers, demo_service, point, in_flight
):
    model = demo_service.script("bank-support", STEPS)
    run = faults.start_run("bank-support", {"model": model}, actor="test", faults={"crash": point})
    doomed = workers.start("doomed", env=support)
    if not in_flight:
        approve_block(run)  # the crash point is past the approval
    doomed.wait(timeout=SLOW)
    assert doomed.returncode == -signal.SIGKILL
    workers.start("healthy", env=support)
    wait_for(lambda: run_status(run) == Run.Status.INTERRUPTED, timeout=SLOW, what="interrupted")

    plan = compute_plan(run)
    approve(run, "strict", plan.fingerprint, actor="test")
    if in_flight:
        approve_block(run)  # the resumed stage reaches the approval now

    run = ended(run)
    assert run.status == Run.Status.SUCCEEDED
    assert Event.objects.filter(run=run, type=Event.Type.PLAN_KEPT).exists()
    assert Checkpoint.objects.get(run=run, stage="support").outputs == ADVICE
    assert len(blocked(demo_service)) == 1
    turns = Effect.objects.filter(run=run, tool="model").order_by("call_id")
    billed = {t.call_id: demo_service.count("chat", t.delivery_key) for t in turns}
    # Every completed turn once; the one in flight at the crash again under its key, as its
    # plan line said it may be.
    assert billed == {"turn-1": 1, "turn-2": 2 if in_flight else 1, "turn-3": 1}
    retried = [e for e in plan.effects if e.may_bill_twice]
    assert [e.call_id for e in retried] == ([in_flight] if in_flight else [])
    assert told(run, "customer_balance") == "$123.45"


def test_an_approval_waits_through_a_worker_restart_and_is_given_on_the_gate_page(
    support, workers, demo_service
):
    model = demo_service.script("bank-support", STEPS)
    run = engine.start_run("bank-support", {"model": model}, actor="test")
    first = workers.start("first", env=support)
    gate = wait_open_gate(run, "block_card-1")
    workers.stop(first)
    workers.start("second", env=support)

    operator = client_as("operator")
    action = reverse("runs:gate_answer", args=[gate.run_id, gate.pk])
    page = operator.get(reverse("runs:gate", args=[gate.run_id, gate.pk])).content.decode()
    shown = form_values(page, action)
    assert shown["digest"] == gate_digest(gate)
    response = operator.post(action, shown | {"decision": "approve"})

    assert response.status_code == 302
    run = ended(run)
    assert run.status == Run.Status.SUCCEEDED
    assert not Event.objects.filter(run=run, type=Event.Type.INTERRUPTED).exists()
    [mail] = blocked(demo_service)
    assert mail["body"] == "John lost his card."
    assert told(run, "block_card") == f"Card blocked ({mail['id']})."
    assert Gate.objects.get(pk=gate.pk).answered_by == "user:operator"


def test_a_denial_through_the_api_is_told_to_the_model_and_the_card_is_not_blocked(
    support, workers, demo_service
):
    model = demo_service.script("bank-support", STEPS)
    run = engine.start_run("bank-support", {"model": model}, actor="test")
    workers.start(env=support)
    gate = wait_open_gate(run, "block_card-1")

    response = api_as("operator").post(
        f"/api/v1/gates/{gate.pk}/answer",
        {"answer": {"decision": "reject", "reason": "He found it."}, "digest": gate_digest(gate)},
        content_type="application/json",
    )

    assert response.status_code == 200
    run = ended(run)
    assert run.status == Run.Status.SUCCEEDED
    assert blocked(demo_service) == []
    assert told(run, "block_card") == "The tool call was denied. He found it."
    assert not Effect.objects.filter(run=run, tool="block_card").exists()


def test_a_reviewers_edit_is_what_the_card_team_gets_and_the_model_is_told_of_it(
    support, workers, demo_service
):
    model = demo_service.script("bank-support", STEPS)
    run = engine.start_run("bank-support-edits", {"model": model}, actor="test")
    workers.start(env=support)
    gate = wait_open_gate(run, "block_card-1")

    answers.answer(
        gate.pk,
        {"decision": "approve", "arg_reason": "Lost on the train."},
        actor="user:ana",
        roles=OPERATOR,
        digest=gate_digest(gate),
    )

    run = ended(run)
    assert run.status == Run.Status.SUCCEEDED
    [mail] = blocked(demo_service)
    assert mail["body"] == "Lost on the train."
    assert json.loads(told(run, "block_card")) == {
        "result": f"Card blocked ({mail['id']}).",
        "reviewer": {
            "by": "user:ana",
            "edited": {"reason": {"asked": "John lost his card.", "sent": "Lost on the train."}},
        },
    }

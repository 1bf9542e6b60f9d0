"""The OpenAI Agents SDK's support agent (examples/openai_agents_support.py) as a Resumer stage,
on real workers against the demo service's scripted model and outbox (issue 46's acceptance):
its approvals, asked in the SDK's terms (`needs_approval`), are answered on the gate page and
by the API across a worker restart; killed after a tool's intent, or while a model turn is in
flight, and strictly resumed, it keeps its plan, the outbox holds one email and the model
billed each turn once. Every count is read at the target: the outbox's mail, the service's
meter of completions."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.urls import reverse

from demo import faults
from demo.models import RunFaults
from runs.gates import answers
from runs.gates.acts import TICK
from runs.gates.decision import gate_digest
from runs.models import ApprovalMode, Checkpoint, Effect, Event, Lease, Run
from runs.planning.planner import compute_plan
from runs.planning.replay import Action
from runs.planning.resume import approve
from tests.support.pipelines import registered
from tests.support.processes import Workers, wait_for
from tests.support.state import run_status, wait_open_gate
from tests.support.web import api_as, client_as, form_values

pytestmark = [pytest.mark.workers, pytest.mark.django_db(transaction=True)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PIPELINE = "openai_agents_support.pipeline"
OPERATOR = frozenset({"operator"})
SLOW = 180
BO = "bo@example.com"
TICKET = "Please cancel order 42 and refund me. Bo"
EMAIL = {"to": BO, "subject": "Your refund for order 42", "body": "Order 42 is cancelled."}
SCRIPT = [
    {"tool_calls": [{"name": "cancel_order", "arguments": {"order_id": 42}}]},
    {"tool_calls": [{"name": "send_email", "arguments": EMAIL}]},
    {"content": "Order 42 is cancelled and Bo has been told."},
]


@pytest.fixture
def support(workers, demo_service, settings, monkeypatch) -> Iterator[dict[str, str]]:
    """The example registered here and, through the environment only, in the workers, with
    the fault hooks on (RESUMER_FAULTS) as for any pipeline of one's own."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    with registered(settings, PIPELINE):
        yield {
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")])
            ),
            "RESUMER_PIPELINES": PIPELINE,
            "RESUMER_FAULTS": "1",
            "SUPPORT_API_URL": demo_service.url,
            "MODEL_BASE_URL": f"{demo_service.url}/v1",
        }
    sys.modules.pop("openai_agents_support", None)


def started(workers: Workers, support: dict, demo_service, **fault: object):
    model = demo_service.script("support", SCRIPT)
    run = faults.start_run(
        "openai-agents-support", {"model": model, "ticket": TICKET}, actor="test", faults=fault
    )
    return run, workers.start("support", env=support)


def approve_gate(run: Run, gate_id: str) -> None:
    gate = wait_open_gate(run, gate_id)
    answers.answer(gate.pk, {"decision": "approve", TICK: "on"}, actor="user:ana", roles=OPERATOR)


def ended(run: Run, status: str = Run.Status.SUCCEEDED) -> Run:
    wait_for(lambda: run_status(run) == status, timeout=SLOW, what=f"{run.public_id}: {status}")
    run.refresh_from_db()
    return run


def each_turn_billed_once(run: Run, demo_service) -> None:
    turns = Effect.objects.filter(run=run, tool="model").order_by("id")
    assert [t.call_id for t in turns] == ["turn-1", "turn-2", "turn-3"]
    assert [demo_service.count("chat", t.delivery_key) for t in turns] == [1, 1, 1]


def one_email(demo_service) -> None:
    sent = [(m["to"], m["subject"], m["body"]) for m in demo_service.mail()]
    assert sent == [(EMAIL["to"], EMAIL["subject"], EMAIL["body"])]


def test_the_sdks_approvals_are_answered_on_the_gate_page_and_by_the_api_across_a_restart(
    support, workers, demo_service
):
    run, first = started(workers, support, demo_service)
    cancel = wait_open_gate(run, "cancel_order-1")
    wait_for(lambda: Lease.objects.get(run=run).holder == "", what="the lease let go")
    workers.stop(first)
    workers.start("after-restart", env=support)

    # cancel_order (needs_approval=True, no policy declared: NEVER) on the gate page.
    operator = client_as("operator")
    action = reverse("runs:gate_answer", args=[run.pk, cancel.pk])
    page = operator.get(reverse("runs:gate", args=[run.pk, cancel.pk])).content.decode()
    assert operator.post(action, form_values(page, action) | {TICK: "on"}).status_code == 302
    # send_email: the SDK's rule asks for approval of a subject about a refund; the API.
    send = wait_open_gate(run, "send_email-1")
    assert send.call["args"] == EMAIL and send.call["policy"] == "IDEMPOTENT"
    answered = api_as("operator").post(
        f"/api/v1/gates/{send.pk}/answer",
        {"answer": dict(send.initial), "digest": gate_digest(send)},
        content_type="application/json",
    )
    assert answered.status_code == 200

    run = ended(run)
    assert Checkpoint.objects.get(run=run, stage="support").outputs == {
        "final_output": SCRIPT[-1]["content"],
        "last_agent": "Support agent",
    }
    one_email(demo_service)
    each_turn_billed_once(run, demo_service)
    assert not Event.objects.filter(run=run, type=Event.Type.DIVERGED).exists()


def killed_at_the_emails_intent(run: Run, workers: Workers, support: dict) -> None:
    """The worker SIGKILLs itself once send_email's intent is recorded, before the call."""
    approve_gate(run, "cancel_order-1")
    approve_gate(run, "send_email-1")
    workers.start("healthy", env=support)


def killed_while_turn_2_is_in_flight(run: Run, workers: Workers, support: dict) -> None:
    """turn-2's intent is recorded and its request stalls; the worker is killed then."""
    doomed = workers.procs[-1]
    approve_gate(run, "cancel_order-1")
    wait_for(
        lambda: Effect.objects.filter(
            run=run, call_id="turn-2", status=Effect.Status.INTENT
        ).exists(),
        timeout=SLOW,
        what="turn-2 in flight",
    )
    workers.stop(doomed)
    RunFaults.objects.filter(run=run).update(stall={})  # the resumed run does not stall
    workers.start("healthy", env=support)


@pytest.mark.parametrize(
    ("fault", "kill", "in_doubt"),
    [
        ({"crash": "support/send_email-1/before"}, killed_at_the_emails_intent, "send_email-1"),
        ({"stall": {"support/turn-2": 600}}, killed_while_turn_2_is_in_flight, "turn-2"),
    ],
    ids=["after-a-tools-intent", "a-model-turn-in-flight"],
)
def test_killed_mid_loop_and_strictly_resumed_it_keeps_its_plan_and_does_each_thing_once(
    support, workers, demo_service, fault, kill, in_doubt
):
    run, _ = started(workers, support, demo_service, **fault)
    kill(run, workers, support)
    run = ended(run, Run.Status.INTERRUPTED)
    plan = compute_plan(run)
    actions = {line.call_id: line.action for line in plan.effects}
    assert actions[in_doubt] == Action.RETRY_SAME_KEY
    assert actions["turn-1"] == actions["cancel_order-1"] == Action.REUSE

    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:op")
    if in_doubt == "turn-2":  # killed before the email's gate: it is asked now
        approve_gate(run, "send_email-1")

    run = ended(run)
    assert Event.objects.filter(run=run, type=Event.Type.PLAN_KEPT).count() == 1
    assert not Event.objects.filter(run=run, type=Event.Type.PLAN_DEVIATED).exists()
    one_email(demo_service)
    each_turn_billed_once(run, demo_service)
    assert Effect.objects.filter(run=run, call_id="cancel_order-1").count() == 1

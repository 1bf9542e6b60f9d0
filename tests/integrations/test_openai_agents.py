"""The OpenAI Agents SDK adapter (runs/integrations/openai_agents/) stage by stage in this
process, against the demo service's scripted model: a handoff's agent is governed like the
first, a reviewer's edit and a rejection reach the model, an undeclared tool is NEVER and its
plan says so, and nothing outside the adapter imports the SDK."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import django_rq
import pytest
from agents import RunContextWrapper, function_tool
from django.conf import settings
from pydantic import Field

from demo import faults
from runs import engine
from runs.gates import answers
from runs.gates import arguments as gate_arguments
from runs.gates.acts import TICK
from runs.integrations.openai_agents import UNDECLARED, Durable
from runs.integrations.openai_agents.tools import pipeline_tool
from runs.ledger.edits import edit_effect
from runs.models import (
    ApprovalMode,
    Checkpoint,
    Effect,
    Event,
    Gate,
    GateStatus,
    ReplayPolicy,
    Run,
)
from runs.pipeline import Confirm, OnReject
from runs.planning.planner import compute_plan
from runs.planning.replay import Action
from runs.planning.resume import approve
from tests.integrations import openai_agents_pipelines as oap
from tests.support.pipelines import registered

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = Path(__file__).resolve().parents[2] / "runs"
OPERATOR = frozenset({"operator"})
HANDOFF = {"tool_calls": [{"name": "transfer_to_billing", "arguments": {}}]}
LOOKUP = {"tool_calls": [{"name": "lookup", "arguments": {"order_id": 7}}]}
REFUND = {"tool_calls": [{"name": "refund", "arguments": {"order_id": 7, "amount": "30.00"}}]}
DONE = {"content": "Done."}


@pytest.fixture(autouse=True)
def billing(settings, redis_conn, demo_service) -> Iterator[None]:
    oap.REFUNDS.clear()
    oap.NOTES.clear()
    with registered(settings, oap.PATH):
        yield


def started(demo_service, name: str, steps: list[dict], **fault: str) -> Run:
    model = demo_service.script(name, steps)
    return faults.start_run(
        "openai-agents-billing", {"model": model}, actor="test", faults=fault, enqueue=False
    )


def execute(run: Run) -> Run:
    """The stage, as a worker would run it, until the run waits, stops or ends."""
    run.refresh_from_db()
    if run.ticket:
        engine.execute(
            run.pk, run.current_stage, run.ticket, holder="test", hooks=faults.FaultHooks()
        )
    django_rq.get_connection(settings.RESUMER_QUEUE).flushdb()  # this test runs the stage
    run.refresh_from_db()
    return run


def answer(run: Run, gate_id: str, **given: str) -> None:
    gate = Gate.objects.get(run=run, gate_id=gate_id, status=GateStatus.OPEN)
    answers.answer(gate.pk, {"decision": "approve", **given}, actor="user:ana", roles=OPERATOR)


def told(run: Run, call_id: str) -> str:
    """What the model's last turn was told of a call (its tool message)."""
    last = Effect.objects.filter(run=run, tool="model").order_by("-id").first()
    messages = last.request["messages"]
    asked = {
        c["id"]: c["function"]["name"]
        for m in messages
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
    }
    [said] = [
        m["content"]
        for m in messages
        if m["role"] == "tool" and asked[m["tool_call_id"]] == call_id.rsplit("-", 1)[0]
    ]
    return said


def test_a_handoffs_agent_is_governed_and_a_reviewers_edit_reaches_the_target_and_the_model(
    demo_service,
):
    run = started(demo_service, "handoff-edit", [HANDOFF, LOOKUP, REFUND, DONE])
    assert execute(run).status == Run.Status.WAITING
    answer(run, "refund-1", arg_amount="20.00")

    run = execute(run)
    assert run.status == Run.Status.SUCCEEDED
    assert oap.REFUNDS == [(7, "20.00")]
    calls = list(Effect.objects.filter(run=run).order_by("id").values_list("call_id", "tool"))
    assert calls == [(f"turn-{n}", "model") for n in (1, 2, 3)] + [
        ("refund-1", "refund"),
        ("turn-4", "model"),
    ]
    assert json.loads(told(run, "refund-1"))["reviewer"]["edited"] == {
        "amount": {"asked": "30.00", "sent": "20.00"}
    }
    assert Checkpoint.objects.get(run=run).outputs == {
        "final_output": "Done.",
        "last_agent": "Billing",
    }


def test_a_refund_its_lookup_found_after_a_lost_answer_is_told_to_the_model_with_the_edit(
    settings, demo_service
):
    with registered(settings, oap.PATH_FOUND):
        model = demo_service.script("found-edit", [HANDOFF, LOOKUP, REFUND, DONE])
        run = faults.start_run(
            "openai-agents-billing-found",
            {"model": model},
            actor="test",
            faults={"timeout": "agent/refund-1/after"},
            enqueue=False,
        )
        assert execute(run).status == Run.Status.WAITING
        # A refund that cannot simply be made again needs the tick that names it.
        answer(run, "refund-1", arg_amount="20.00", **{TICK: "on"})
        assert execute(run).status == Run.Status.FAILED  # the refund's answer never came
        plan = compute_plan(run)
        [line] = [e for e in plan.effects if e.call_id == "refund-1"]
        assert line.action == Action.RECORD_FOUND
        approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:op")

        run = execute(run)

    assert run.status == Run.Status.SUCCEEDED
    assert oap.REFUNDS == [(7, "20.00")]
    said = json.loads(told(run, "refund-1"))
    assert said["output"] == "Refunded 20.00 on order 7"
    assert said["reviewer"]["edited"] == {"amount": {"asked": "30.00", "sent": "20.00"}}


def test_instructions_that_say_the_recorded_date_ask_the_same_after_a_gate(settings, demo_service):
    with registered(settings, oap.PATH_DATED):
        model = demo_service.script("dated", [REFUND, DONE])
        run = faults.start_run("openai-agents-dated", {"model": model}, actor="test", enqueue=False)
        assert execute(run).status == Run.Status.WAITING
        answer(run, "refund-1")

        run = execute(run)

    assert run.status == Run.Status.SUCCEEDED
    assert not Event.objects.filter(run=run, type=Event.Type.DIVERGED).exists()
    [now] = Event.objects.filter(run=run, type=Event.Type.VALUE_RECORDED)
    turn = Effect.objects.get(run=run, call_id="turn-1")
    [system] = [m for m in turn.request["messages"] if m["role"] == "system"]
    assert system["content"] == f"Today is {now.payload['value']}. Refund orders."
    assert oap.REFUNDS == [(7, "30.00")]


def test_a_refund_a_supervisor_confirmed_by_hand_is_told_to_the_model_by_its_id(demo_service):
    run = started(
        demo_service,
        "confirmed-by-hand",
        [HANDOFF, LOOKUP, REFUND, DONE],
        timeout="agent/refund-1/after",
    )
    assert execute(run).status == Run.Status.WAITING
    answer(run, "refund-1")
    assert execute(run).status == Run.Status.FAILED  # the refund's answer never came
    edit_effect(
        Effect.objects.get(run=run, call_id="refund-1").pk,
        {"status": "confirmed", "external_id": "rf-9"},
        reason="the payments desk shows rf-9",
        actor="user:sue",
    )
    approve(run, ApprovalMode.STRICT, compute_plan(run).fingerprint, actor="user:op")

    run = execute(run)

    assert run.status == Run.Status.SUCCEEDED
    assert json.loads(told(run, "refund-1")) == {"external_id": "rf-9"}


def test_a_rejection_is_the_tools_result_in_the_sdks_words_with_the_reason(demo_service):
    run = started(demo_service, "handoff-reject", [HANDOFF, REFUND, DONE])
    execute(run)
    gate = Gate.objects.get(run=run, gate_id="refund-1", status=GateStatus.OPEN)
    answers.answer(
        gate.pk, {"decision": "reject", "reason": "too much"}, actor="user:ana", roles=OPERATOR
    )

    assert execute(run).status == Run.Status.SUCCEEDED
    assert oap.REFUNDS == []
    assert (
        told(run, "refund-1") == "Tool execution was not approved. Rejected by user:ana: too much"
    )


def test_a_tool_nobody_declared_is_never_run_again_and_its_plan_says_why(demo_service):
    steps = [HANDOFF, {"tool_calls": [{"name": "note", "arguments": {"text": "refund"}}]}, DONE]
    run = started(demo_service, "undeclared", steps, timeout="agent/note-1/after")

    assert execute(run).status == Run.Status.FAILED
    [line] = [line for line in compute_plan(run).effects if line.call_id == "note-1"]
    assert (line.policy, line.action) == ("NEVER", Action.BLOCKED)
    assert line.answer.endswith(UNDECLARED)
    assert oap.NOTES == ["refund"]


def test_a_durable_confirmation_without_needs_approval_confirms_every_call():
    @function_tool
    def pay_back(order: str, amount: str) -> str:
        """Refunds an order."""
        return amount

    declared = Durable(ReplayPolicy.IDEMPOTENT, confirm=Confirm(editable=("amount",)))
    confirm = pipeline_tool(pay_back, declared).confirmation

    assert confirm is not None and confirm.when is None
    assert (confirm.editable, confirm.on_reject) == (("amount",), OnReject.RETURN)
    assert pipeline_tool(pay_back, Durable(ReplayPolicy.IDEMPOTENT)).confirmation is None


def test_an_edit_is_checked_against_the_wrapped_functions_signature():
    # Typed by the model's proposed value (50, an integer), 2.5 was refused and -5 or 600
    # recorded, the call then refused by the SDK: the signature says what the tool takes.
    @function_tool
    def send_tip(
        ctx: RunContextWrapper[None], amount: Annotated[float, Field(gt=0, le=200)]
    ) -> str:
        """Sends a tip."""
        return str(amount)

    tool = pipeline_tool(
        send_tip, Durable(ReplayPolicy.IDEMPOTENT, confirm=Confirm(editable=("amount",)))
    )
    described, _ = gate_arguments.describe(tool, {"amount": 50})
    call = {"tool": "send_tip", "args": {"amount": 50}, "arguments": described}

    assert described["amount"] == {"kind": "number", "rules": ["> 0", "≤ 200"]}
    assert gate_arguments.edited(call, {"amount": "2.5"}, tool) == {"amount": 2.5}
    for wrong in ("-5", "600"):
        with pytest.raises(gate_arguments.EditRefused):
            gate_arguments.edited(call, {"amount": wrong}, tool)


def test_only_the_adapters_package_imports_the_sdk():
    importing = set()
    for path in RUNS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(name.split(".")[0] == "agents" for name in names):
                importing.add(path.parent.relative_to(RUNS).as_posix())
    assert importing == {"integrations/openai_agents"}

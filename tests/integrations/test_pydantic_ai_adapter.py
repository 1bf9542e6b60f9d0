"""What ResumerAgent (runs/integrations/pydantic_ai/) makes of a Pydantic AI agent before it
runs: a pipeline tool per function tool with the policy declared for it (NEVER, said in the
plan, when none is), the SDK's approval as a confirmation, the path a plan promises, the
requests the model tool cannot make refused by name; and the core without the SDK."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel, Field
from pydantic_ai import Agent, RunContext

from runs.gates import arguments as gate_arguments
from runs.integrations.pydantic_ai import Policy, ResumerAgent
from runs.integrations.pydantic_ai.model import ModelRequestRefused, arguments
from runs.integrations.pydantic_ai.toolset import UNDECLARED
from runs.models import ReplayPolicy
from runs.pipeline import Call, Confirm, OnReject
from runs.planning import model_lines
from runs.planning.replay import Action, Decision, StopKind

ROOT = Path(__file__).resolve().parents[2]


class Answer(BaseModel):
    text: str


def support_agent() -> Agent:
    agent = Agent("openai:gpt-4o", output_type=Answer, defer_model_check=True)

    @agent.tool
    async def lookup(ctx: RunContext[None], account: str) -> str:
        """Looks the account up."""
        return account

    @agent.tool(requires_approval=True)
    async def refund(ctx: RunContext[None], amount: str) -> str:
        """Refunds the customer."""
        return amount

    return agent


def tools_of(agent: ResumerAgent) -> dict:
    return {tool.name: tool for tool in agent.tools}


def test_a_tool_without_a_declared_policy_is_never_and_its_stopped_plan_line_says_so():
    tools = tools_of(ResumerAgent(support_agent(), policies={"lookup": ReplayPolicy.SAFE}))
    refund = tools["refund"]
    stopped = Decision(Action.BLOCKED, "intent: outcome unknown", kind=StopKind.INTENT)

    assert (refund.policy, tools["lookup"].policy) == (ReplayPolicy.NEVER, ReplayPolicy.SAFE)
    assert model_lines.answer(refund, stopped) == f"intent: outcome unknown; {UNDECLARED}"
    assert model_lines.answer(tools["lookup"], stopped) == "intent: outcome unknown"


def test_a_declared_policy_gives_the_tool_its_key_and_verb():
    tools = tools_of(
        ResumerAgent(
            support_agent(), policies={"refund": Policy(ReplayPolicy.IDEMPOTENT, verb="refund")}
        )
    )

    assert tools["refund"].policy == ReplayPolicy.IDEMPOTENT
    assert (tools["refund"].verb, tools["refund"].caveat) == ("refund", "")
    assert tools["refund"].key is not None


def test_the_sdks_approval_is_a_confirmation_whose_denial_is_handed_to_the_model():
    tools = tools_of(ResumerAgent(support_agent()))

    confirm = tools["refund"].confirmation
    assert confirm is not None and confirm.on_reject == OnReject.RETURN
    assert confirm.description == "Refunds the customer."
    assert tools["lookup"].confirmation is None


def test_a_policys_own_confirmation_of_an_approval_still_hands_the_denial_to_the_model():
    policy = Policy(ReplayPolicy.IDEMPOTENT, confirm=Confirm(editable=("amount",)))
    tools = tools_of(ResumerAgent(support_agent(), policies={"refund": policy}))

    confirm = tools["refund"].confirmation
    assert (confirm.editable, confirm.on_reject) == (("amount",), OnReject.RETURN)


class Refund(BaseModel):
    amount: Annotated[float, Field(gt=0)]
    note: str = ""


def refund_agent() -> Agent:
    agent = Agent("openai:gpt-4o", output_type=Answer, defer_model_check=True)

    @agent.tool(requires_approval=True)
    async def refund(
        ctx: RunContext[None], amount: Annotated[float, Field(gt=0, le=500)], note: str = ""
    ) -> str:
        """Refunds the customer."""
        return note

    @agent.tool_plain
    async def replace(order: Refund) -> str:
        """A lone model: the SDK takes its fields as the tool's arguments."""
        return order.note

    return agent


def test_an_edit_the_tools_signature_refuses_is_refused_before_anything_is_recorded():
    # A reviewer's -5 or 600 used to be recorded as the answer and fail the stage when the SDK
    # checked it: the signature's own constraints now check the edit on the gate.
    confirm = Confirm(editable=("amount",))
    tools = tools_of(
        ResumerAgent(
            refund_agent(), policies={"refund": Policy(ReplayPolicy.IDEMPOTENT, confirm=confirm)}
        )
    )
    refund = tools["refund"]
    asked = {"amount": 42.5, "note": "late"}
    described, schema = gate_arguments.describe(refund, asked)
    call = {"tool": "refund", "args": asked, "arguments": described}

    for wrong, said in (("-5", "greater than 0"), ("600", "less than or equal to 500")):
        with pytest.raises(gate_arguments.EditRefused, match=said):
            gate_arguments.edited(call, {"amount": wrong}, refund)
    assert gate_arguments.edited(call, {"amount": "30"}, refund) == {"amount": 30.0, "note": "late"}
    assert described["amount"]["rules"] == ["> 0", "≤ 500"]
    assert schema["properties"]["amount"]["exclusiveMinimum"] == 0


def test_a_lone_model_parameter_is_the_tools_arguments_model():
    tools = tools_of(ResumerAgent(refund_agent()))

    assert tools["replace"].args is Refund
    assert set(tools["refund"].args.model_fields) == {"amount", "note"}


def test_a_policy_for_a_tool_the_agent_does_not_have_is_refused():
    with pytest.raises(ValueError, match="policies name tools the agent does not have: charge"):
        ResumerAgent(support_agent(), policies={"charge": ReplayPolicy.NEVER})


def test_the_expected_path_is_a_turn_before_each_tool_and_one_to_answer():
    agent = ResumerAgent(support_agent(), call_prefix="support")

    assert agent.expected_calls("lookup", "refund", "lookup") == (
        Call("support.turn-1", "model"),
        Call("support.lookup-1", "lookup"),
        Call("support.turn-2", "model"),
        Call("support.refund-1", "refund"),
        Call("support.turn-3", "model"),
        Call("support.lookup-2", "lookup"),
        Call("support.turn-4", "model"),
    )


def test_tools_one_answer_asks_for_together_follow_one_turn():
    agent = ResumerAgent(support_agent(), call_prefix="support")

    assert agent.expected_calls(("lookup", "lookup"), "refund") == (
        Call("support.turn-1", "model"),
        Call("support.lookup-1", "lookup"),
        Call("support.lookup-2", "lookup"),
        Call("support.turn-2", "model"),
        Call("support.refund-1", "refund"),
        Call("support.turn-3", "model"),
    )


def test_a_parameter_the_model_tool_does_not_pass_on_is_refused_by_name():
    body = {"model": "m", "messages": [], "stream": False, "parallel_tool_calls": True}

    with pytest.raises(ModelRequestRefused, match="does not pass on parallel_tool_calls"):
        arguments(body)


def test_a_streamed_request_is_refused():
    with pytest.raises(ModelRequestRefused, match="streaming is not supported"):
        arguments({"model": "m", "messages": [], "stream": True})


def test_resumer_imports_and_checks_without_the_sdk():
    # Every module of runs but the adapters, and the system check, with the SDK unimportable.
    script = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        sys.modules["pydantic_ai"] = None
        import django
        django.setup()
        import runs
        for module in pkgutil.walk_packages(runs.__path__, "runs."):
            if not module.name.startswith(("runs.integrations", "runs.migrations")):
                importlib.import_module(module.name)
        from django.core.management import call_command
        call_command("check")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr[-2000:]


def test_a_call_a_supervisor_confirmed_by_hand_is_told_to_the_model_by_its_id():
    from runs.integrations.pydantic_ai.toolset import _told

    assert _told({"external_id": "rf-9"}, None) == {"external_id": "rf-9"}
    assert _told({"result": {"ok": True}, "external_id": "rf-9"}, None) == {"ok": True}

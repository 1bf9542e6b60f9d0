"""What the LangGraph adapter's declarations say before any stage runs
(runs/integrations/langgraph/): a tool's replay policy, NEVER when none is said; a durable
tool outside a stage is the tool its author wrote; the chat model has no ledger outside one;
LangChain's tool choices and structured output in the chat API's words; tool calls numbered
as a turn asked them."""

from __future__ import annotations

from typing import Literal

import pytest
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from pydantic import BaseModel

from runs.integrations.langgraph import ChatResumer, GraphAgent, Policy, durable, durable_tools
from runs.integrations.langgraph.bridge import Numbering
from runs.models import ReplayPolicy
from runs.pipeline import Confirm


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: shipped"


@tool
def refund(order: str, cents: int) -> dict:
    """Refund an order."""
    return {"refunded": cents}


def test_a_tool_declared_without_a_policy_is_never_and_says_so():
    declared = durable()(refund).resumer

    assert declared.policy == ReplayPolicy.NEVER
    assert "no replay policy declared: NEVER" in declared.description
    assert declared.key is not None


def test_the_mapping_gives_each_named_tool_its_policy_and_the_others_never():
    looked, refunded = durable_tools([lookup, refund], {"lookup": ReplayPolicy.SAFE})

    assert (looked.resumer.policy, refunded.resumer.policy) == (
        ReplayPolicy.SAFE,
        ReplayPolicy.NEVER,
    )


def test_a_policy_in_the_mapping_carries_its_confirmation():
    [refunded] = durable_tools(
        [refund], {"refund": Policy(ReplayPolicy.IDEMPOTENT, confirm=Confirm(editable=("cents",)))}
    )

    assert refunded.resumer.confirmation.editable == ("cents",)
    assert set(refunded.resumer.args.model_fields) == {"order", "cents"}


def test_a_policy_for_a_tool_the_list_does_not_have_is_refused():
    with pytest.raises(ValueError, match="policies name tools the list does not have: typo"):
        durable_tools([lookup, refund], {"typo": ReplayPolicy.SAFE})


def test_a_durable_tool_outside_a_stage_is_the_tool_its_author_wrote():
    assert durable(ReplayPolicy.SAFE)(lookup).invoke({"order": "A-1"}) == "order A-1: shipped"


def test_the_chat_model_refuses_to_answer_outside_a_stage():
    with pytest.raises(RuntimeError, match="inside a Resumer stage only"):
        ChatResumer(model="gpt-5-nano").invoke("hello")


def test_a_graph_agent_refuses_a_tool_that_would_bypass_the_ledger():
    graph = StateGraph(MessagesState)
    graph.add_node("noop", lambda state: {})
    graph.add_edge(START, "noop")

    with pytest.raises(TypeError, match="is not durable"):
        GraphAgent(graph, tools=[lookup])


@pytest.mark.parametrize(
    ("said", "sent"),
    [
        ("any", "required"),
        ("auto", "auto"),
        ("lookup", {"type": "function", "function": {"name": "lookup"}}),
    ],
)
def test_langchains_tool_choice_is_sent_in_the_chat_apis_words(said, sent):
    bound = ChatResumer(model="m").bind_tools([lookup], tool_choice=said)

    assert bound.kwargs["tool_choice"] == sent


def test_the_tool_calls_a_turn_asked_for_keep_the_numbers_given_as_it_answered():
    numbering = Numbering(["lookup"])
    numbering.assign([("lookup", "call_a"), ("not_a_tool", "call_x"), ("lookup", "call_b")])

    # Run in any order (a ToolNode's pool), each call keeps its number; a node's own
    # invocation takes the next.
    assert numbering.tool("lookup", "call_b") == "lookup-2"
    assert numbering.tool("lookup", "call_a") == "lookup-1"
    assert numbering.tool("lookup", None) == "lookup-3"


def test_structured_output_is_asked_as_the_chat_apis_json_schema_response_format():
    class Triage(BaseModel):
        """How the email is handled."""

        label: Literal["ignore", "respond"]

    asked = ChatResumer(model="m").with_structured_output(Triage).first.kwargs

    assert asked["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "Triage",
            "description": "How the email is handled.",
            "schema": {
                "type": "object",
                "properties": {"label": {"enum": ["ignore", "respond"], "type": "string"}},
                "required": ["label"],
            },
            "strict": False,
        },
    }

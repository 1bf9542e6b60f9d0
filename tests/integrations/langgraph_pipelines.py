"""A LangGraph ReAct agent for the adapter's tests on real workers
(tests/integrations/test_langgraph_workers.py): a model node and LangGraph's prebuilt
ToolNode, which runs a turn's tool calls on a thread pool. Its model is the demo service's
scripted model (the run's input, "script:<name>"); its mail the demo service's outbox."""

from __future__ import annotations

from typing import Annotated, TypedDict

import httpx
from django import forms
from django.conf import settings
from langchain_core.tools import InjectedToolArg, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

from runs.integrations.langgraph import ChatResumer, GraphAgent, Interrupt, durable
from runs.models import ReplayPolicy
from runs.pipeline import Confirm, Input, OnReject, Pipeline, Stage, StageOutput
from runs.tools.model import model_tool

PATH = "tests.integrations.langgraph_pipelines.react"
ASKING_TOOL = "tests.integrations.langgraph_pipelines.asking_tool"


@durable(ReplayPolicy.SAFE)
@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"clear in {city}"


# No policy said: NEVER, the safest.
@durable(confirm=Confirm(editable=("body",), on_reject=OnReject.RETURN))
@tool
def send_mail(to: str, body: str, delivery_key: Annotated[str, InjectedToolArg] = "") -> dict:
    """Send an email."""
    sent = httpx.post(
        f"{settings.DEMO_SERVICE_URL}/v1/mail",
        json={"to": to, "subject": "Weather", "body": body},
        headers={"Idempotency-Key": delivery_key},
        trust_env=False,
        timeout=10,
    )
    sent.raise_for_status()
    return {"sent": sent.json()["id"]}


llm = ChatResumer(model="script:none").bind_tools([weather, send_mail])


def call_model(state: MessagesState) -> dict:
    return {"messages": [llm.invoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("agent", call_model)
builder.add_node("tools", ToolNode([weather, send_mail]))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
agent = GraphAgent(builder, tools=[weather, send_mail])


def run_agent(ctx) -> StageOutput:
    state = agent.invoke(
        ctx, {"messages": [("user", "Mail ana the weather.")]}, model=ctx.inputs["model"]
    )
    return StageOutput(outputs={"answer": state["messages"][-1].content})


react = Pipeline(
    name="langgraph-react",
    inputs=(Input("model", lambda pinned: "script:none", versioned=False),),
    tools=(model_tool("model", base_url=lambda: f"{settings.DEMO_SERVICE_URL}/v1"), *agent.tools),
    stages=(Stage("agent", run_agent, consumes=("model",), tools=("model", *agent.tool_names)),),
)


# A tool that asks a person from inside itself, as LangGraph's docs show for tool approval:
# under Resumer its intent is written before it runs, so the interrupt is refused.
@durable(ReplayPolicy.IDEMPOTENT)
@tool
def book_hotel(hotel_name: str) -> str:
    """Book a hotel."""
    interrupt(f"Book {hotel_name}?")
    return f"booked {hotel_name}"


def book(state: MessagesState) -> dict:
    return {"messages": [("ai", book_hotel.invoke({"hotel_name": "McKittrick"}))]}


booking = StateGraph(MessagesState)
booking.add_node("book", book)
booking.add_edge(START, "book")
booker = GraphAgent(booking, tools=[book_hotel])


def run_booker(ctx) -> StageOutput:
    booker.invoke(ctx, {"messages": []})
    return StageOutput(outputs={})


asking_tool = Pipeline(
    name="langgraph-asking-tool",
    tools=booker.tools,
    stages=(Stage("book", run_booker, tools=booker.tool_names),),
)


# An interrupt inside a subgraph: declared by the node that calls interrupt() ("edit"),
# though the gate is numbered by the graph's own node ("drafting").
SUBGRAPH = "tests.integrations.langgraph_pipelines.subgraph_pipeline"


class DraftEdit(forms.Form):
    text = forms.CharField(min_length=5)


class Draft(TypedDict, total=False):
    text: str


def _edit(state: Draft) -> Draft:
    return {"text": interrupt({"draft": state.get("text", "")})}


_inner = StateGraph(Draft)
_inner.add_node("edit", _edit)
_inner.add_edge(START, "edit")
_outer = StateGraph(Draft)
_outer.add_node("drafting", _inner.compile())
_outer.add_edge(START, "drafting")
drafting = GraphAgent(
    _outer,
    interrupts={"edit": Interrupt(form=DraftEdit, resume=lambda answer: answer["text"])},
)


def _draft(ctx) -> StageOutput:
    state = drafting.invoke(ctx, {"text": "first go"})
    return StageOutput(outputs={"text": state["text"]})


subgraph_pipeline = Pipeline(name="langgraph-subgraph", tools=(), stages=(Stage("draft", _draft),))

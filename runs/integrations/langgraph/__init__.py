"""LangGraph agents as Resumer stages: a compiled graph run by LangGraph's own runner inside a
stage, every chat model turn, tool call and interrupt through the stage's context.

    ChatResumer ......... the chat model (chat_model.py): each turn a call of the model tool
    durable, durable_tools .. a tool's replay policy (tools.py): each call a ctx.call
    GraphAgent, Interrupt ... the graph in a stage (graph.py): interrupt() a Resumer gate
    bridge.py ........... how the graph's threads reach the stage's context, and the call ids

Imports LangGraph and langchain-core (requirements-agents.txt); nothing outside this package
imports it. docs/agents.md says what to write and what a crash and a resume look like.

May import: pipeline, models, review, ledger (a call's key: the canonical digest), tools (the
model tool's parameters) and gates (the text answer a gate asks with by default).
"""

from runs.integrations.langgraph.chat_model import ChatResumer
from runs.integrations.langgraph.graph import GraphAgent, Interrupt
from runs.integrations.langgraph.tools import DurableTool, Policy, durable, durable_tools

__all__ = [
    "ChatResumer",
    "DurableTool",
    "GraphAgent",
    "Interrupt",
    "Policy",
    "durable",
    "durable_tools",
]

"""Adapters that run agents written for other SDKs as Resumer stages, one package per SDK
(`openai_agents/`, `pydantic_ai/`, `langgraph/`): the SDK's own agent, run by its own runner
inside a stage, its model calls and tool calls made through the stage's context (ctx.call),
its human-in-the-loop through Resumer's gates. Only an adapter's package imports its SDK, and
nothing of the core imports this package, so Resumer runs without the SDKs installed
(requirements-agents.txt has them).

May import: pipeline, models, review, ledger (a call's key: the canonical digest), tools (the
model tool's parameters) and gates (the forms a gate asks with); never the engine, a face or
the planner. Each adapter's package says what it may.
"""

"""Adapters that run agents written for other SDKs as Resumer stages: the SDK's own agent, run
by its own runner inside a stage, its model calls and tool calls made through the stage's
context (ctx.call), its human-in-the-loop through Resumer's gates. Each SDK has a package of
its own here, and only that package imports the SDK: the core never imports this package, so
Resumer runs without any of the SDKs installed (requirements-agents.txt installs them).

May import: pipeline, models, review, ledger (a call's key: the canonical digest), tools (the
model tool's parameters) and gates (the forms a gate asks with); never the engine, a face or
the planner.
"""

"""Adapters that run agents written for other SDKs as Resumer stages, one package per SDK
(`openai_agents/`, `pydantic_ai/`, …). Each imports its SDK only inside itself, and nothing of
the core imports this package, so Resumer runs without the SDKs installed
(requirements-agents.txt has them).

May import: nothing of runs (each adapter's package says what it may).
"""

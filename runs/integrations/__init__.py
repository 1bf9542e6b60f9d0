"""Adapters that run agents written for other SDKs as Resumer stages, one package per SDK
(`openai_agents/`, `pydantic_ai/`, …). Each imports its SDK only inside itself, and nothing of
the core imports this package, so Resumer runs without the SDKs installed
(requirements-agents.txt has them).

May import: pipeline and ledger (`keys.py`: a tool's delivery key when it declares none);
each adapter's package says what it may.
"""

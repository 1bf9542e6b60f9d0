"""Ready-made kinds of tools for pipelines. Each builder returns a plain runs.pipeline.Tool, so
the engine and the planner know one tool type; runs.tools.http declares tools that call JSON
APIs over HTTP, runs.tools.model chat completions.

May import: pipeline, ledger (recorded exchanges, artifacts), models and tracing.
"""

"""Prometheus metrics at /metrics (docs/monitoring.md). Traces live in runs/tracing.py.

Owns `metrics` (a prometheus_client Collector that computes every figure from the database
when Prometheus scrapes: the event log is the source of truth, so counters are exact across
worker processes, machines and restarts) and `views` (the /metrics endpoint and its guard).

May import: models, events (payload fields in queries), pipeline (a tool's declared policy)
and proxies (the client's address); nothing imports it but resumer/urls.py. It writes
nothing.
"""

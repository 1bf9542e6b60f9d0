"""Prometheus metrics at /metrics and the probe at /healthz (docs/monitoring.md). Traces live
in runs/tracing.py.

Owns `metrics` (a prometheus_client Collector that computes every figure from the database
when Prometheus scrapes: the event log is the source of truth, so counters are exact across
worker processes, machines and restarts), `health` (whether this process's database and
Redis answer) and `views` (the two endpoints, /metrics's guard).

May import: models, events (payload fields in queries), pipeline (a tool's declared policy),
proxies (the client's address) and enqueue (the queue /healthz pings); nothing imports it
but resumer/urls.py. It writes nothing.
"""

"""Execution: what a worker does. The stage job, the durable tool call through StageContext,
the call hooks a deployment installs, what a stage job logged (the stage log), the sweeper
that finds dead workers, the supervisor that restarts a worker, and the RQ worker class.

May import the ledger, planning (the replay decision and the contract it keeps),
runs.models, runs.pipeline and runs.enqueue, and runs.tools.model (the worker loads its SDK
before its first job); never the dashboard.
"""

"""Execution: what a worker does. The stage job, the durable tool call through StageContext,
the call hooks a deployment installs, what a stage job logged (the stage log), the sweeper
that finds dead workers, the supervisor that restarts a worker, and the RQ worker class.

May import: ledger, planning (the replay decision and the contract it keeps), gates (asking a
human: the gate decision, its form, its rows), models, events, pipeline, review, enqueue, ids,
tracing and notify (the sweeper thread closes notification windows), and tools (the worker
loads the model SDK before its first job); never a face.
"""

"""Planning: what a resume would do, computed from the ledger's facts, and its approval.

Owns the replay decision (replay.py), the planner (a value that changes nothing), stored
plans, the approved plan as a contract, the approval itself (resume.py), bulk triage and the
plan as text. May import the ledger, runs.models, runs.pipeline and runs.enqueue; never
execution or the dashboard.
"""

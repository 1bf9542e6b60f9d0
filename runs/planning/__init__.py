"""Planning: what a resume would do, computed from the ledger's facts, and its approval.

Owns the replay decision (replay.py), the planner (a value that changes nothing), stored
plans, the approved plan as a contract, the approval itself (resume.py), bulk triage, the
ways a stopped run ends without a resume (acknowledge.py, close_out.py) and the plan as
text.

May import: ledger, gates (the gate decision, which confirmed calls a target refused, what an
approved call is made with, for the plan's lines), models, events, pipeline, enqueue, ids and quantities;
never execution or a face.
"""

"""The ledger: the facts a run is made of, and the one path every event is written by.

Owns the one append path (append.py) and the per-vendor SQL it runs (sql/), the hash chain
and its verification (chain.py), the effect ledger (effects.py), checkpoints, supervisors'
edits, leases, content-addressed artifacts and the maintenance switch for the append-only
triggers. Whoever writes an event (the engine, the gates, the planner's approval) builds it
through its class (runs/events.py) and writes it through append().

May import: models, events (the event classes it writes and reads), signals, pipeline and
ids; never planning, execution, the gates, a face or notifications (they hear of stops
through runs.signals).
"""

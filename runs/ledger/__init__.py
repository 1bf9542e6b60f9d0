"""The ledger: the facts a run is made of, and the only code that writes them.

Owns the one append path (append.py) and the per-vendor SQL it runs (sql/), the hash chain
and its verification (chain.py), the effect ledger (effects.py), checkpoints, supervisors'
edits, leases, content-addressed artifacts and the maintenance switch for the append-only
triggers. May import runs.models, runs.events (the event classes it writes and reads),
runs.signals, runs.pipeline and runs.ids; never planning,
execution, the dashboard or notifications (they hear of stops through runs.signals).
"""

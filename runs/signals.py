"""Signals of the run ledger. Sent after the transaction that caused them commits.

May import: nothing of runs.
"""

from django.dispatch import Signal

# A run moved into a status a human resolves (interrupted, failed, needs approval), its facts
# changed while it waits there (a supervisor's ledger edit), or its resumed work departed from
# its approved plan. Arguments: run_pk; status (the status the event moved the run into, or
# None when it did not move it); seq and event_type (the event's); previous_status.
# Receivers (connected in RunsConfig.ready): stored_plans computes the plan, notify tells
# people.
run_stopped = Signal()

# A gate's escalation time came (80 % of its timeout) and nobody answered: notify tells the
# gate's escalation role. Arguments: gate_pk, run_pk.
gate_escalating = Signal()

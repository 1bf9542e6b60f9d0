"""Signals of the run ledger. Sent after the transaction that caused them commits."""

from django.dispatch import Signal

# A run moved into a status a human resolves (interrupted, failed, needs approval), or its
# facts changed while it waits there (a supervisor's ledger edit). Arguments: run_pk, status.
run_stopped = Signal()

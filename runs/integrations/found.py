"""What a tool's own lookup found on its target, shaped as its adapter records a call it made.

A RECONCILE_FIRST tool's `reconcile` returns `Reconciliation(found=True, result=...)` with
whatever its author reads from the target (a string, a dict, nothing). The ledger records that
result as the call's, and a stage run again hands it back as the call's outcome: an adapter
that recorded its own calls as `{"output": ...}` (or `{"result": ...}`) would read a bare
string as something else, and tell the model neither the output nor what a reviewer changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from runs.models import Effect
from runs.pipeline import Reconciliation

__all__ = ["shaped"]

Reconcile = Callable[[Effect], Reconciliation]


def shaped(reconcile: Reconcile | None, field: str) -> Reconcile | None:
    """`reconcile`, its found result put under `field` beside the external id, as the adapter's
    own calls record theirs; a result already so shaped is left alone. Found with no result,
    the external id is what the model is told, as for an effect a supervisor confirmed."""
    if reconcile is None:
        return None

    def reconciled(effect: Effect) -> Reconciliation:
        found = reconcile(effect)
        if not found.found or (isinstance(found.result, dict) and field in found.result):
            return found
        output = found.result if found.result is not None else {"external_id": found.external_id}
        result = {field: output, "external_id": found.external_id}
        return dataclasses.replace(found, result=result)

    return reconciled

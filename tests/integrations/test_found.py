"""A tool's own lookup, shaped as its adapter records a call it made
(runs/integrations/found.py)."""

from __future__ import annotations

import pytest

from runs.integrations.found import shaped
from runs.pipeline import Reconciliation


def looked_up(found: Reconciliation):
    return shaped(lambda effect: found, "output")


@pytest.mark.parametrize("result", ["Refunded 20.00", {"refund": "rf-7"}, ["rf-7"]])
def test_a_found_result_goes_under_the_adapters_field_beside_the_external_id(result):
    found = looked_up(Reconciliation(True, external_id="rf-7", result=result))(None)

    assert found.result == {"output": result, "external_id": "rf-7"}
    assert (found.found, found.external_id) == (True, "rf-7")


def test_a_found_result_with_nothing_more_tells_its_external_id():
    found = looked_up(Reconciliation(True, external_id="rf-7"))(None)

    assert found.result == {"output": {"external_id": "rf-7"}, "external_id": "rf-7"}


def test_a_result_already_shaped_and_a_miss_are_left_alone():
    recorded = {"output": "Refunded", "external_id": "rf-7"}
    kept = Reconciliation(True, external_id="rf-7", result=recorded)
    missed = Reconciliation(False, detail="no refund")

    assert looked_up(kept)(None) is kept
    assert looked_up(missed)(None) is missed
    assert shaped(None, "output") is None

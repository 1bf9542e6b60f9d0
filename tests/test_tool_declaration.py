"""A Tool as a pipeline declares it (runs/pipeline.py): what it is given is read as it means,
and what makes no sense is a ValueError naming the tool when the pipeline is imported, never
a failure at its first call."""

from __future__ import annotations

from decimal import Decimal

import pytest

from runs.models import ReplayPolicy
from runs.pipeline import KeyParts, Tool


def _key(ctx, args) -> KeyParts:
    return KeyParts("acct", "target", "object", "1")


def test_a_cost_given_as_text_or_a_number_is_read_as_its_price():
    assert Tool("t", ReplayPolicy.NEVER, call=dict, key=_key, cost="12.00").cost == Decimal("12.00")
    assert Tool("t", ReplayPolicy.SAFE, call=dict, cost=3).cost == Decimal(3)


@pytest.mark.parametrize("cost", ["abc", "-1", "NaN", None])
def test_a_cost_that_is_not_a_price_is_refused_naming_the_tool(cost):
    with pytest.raises(ValueError, match="tool t: cost is a price of 0 or more"):
        Tool("t", ReplayPolicy.SAFE, call=dict, cost=cost)

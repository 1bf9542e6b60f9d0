"""The one JSON form: what a stage is handed is what a JSON round trip of its result gives,
whichever way as_recorded gets there."""

from __future__ import annotations

import json
from decimal import Decimal
from enum import StrEnum

import pytest

from runs.ledger.canonical import as_recorded, canonical_json


class Colour(StrEnum):
    RED = "red"


VALUES = [
    {"external_id": "7", "status": "sent"},  # a typical tool's result: the flat path
    {"b": 1, "a": True, "c": None, "d": "x"},
    {},
    {"n": 1.1, "a": 1},  # a float's text is not always its repr: the round trip decides
    {"nested": {"z": 1, "a": [3, {"y": 2, "b": 1}]}},
    {1: "a", 2: "b"},  # a key that is not a string becomes one
    {"colour": Colour.RED, "when": Decimal("1.50"), "t": (1, 2)},
    ["b", {"y": 1, "a": 2}],
    "text",
    7,
    None,
]


@pytest.mark.parametrize("value", VALUES, ids=[repr(v)[:40] for v in VALUES])
def test_as_recorded_is_the_json_round_trip_of_a_value_keys_sorted(value):
    recorded = as_recorded(value)
    round_trip = json.loads(canonical_json(value))
    assert recorded == round_trip
    assert json.dumps(recorded) == json.dumps(round_trip)  # the same key order, the same types
    assert [type(v) for v in _leaves(recorded)] == [type(v) for v in _leaves(round_trip)]


def test_a_flat_result_is_handed_back_as_a_new_object():
    result = {"b": "2", "a": "1"}
    recorded = as_recorded(result)
    recorded["c"] = "3"
    assert result == {"b": "2", "a": "1"}
    assert list(as_recorded(result)) == ["a", "b"]


def _leaves(value):
    if isinstance(value, dict):
        for key in value:
            yield from _leaves(value[key])
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value

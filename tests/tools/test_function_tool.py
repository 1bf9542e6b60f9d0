"""Tools made of typed functions (runs/tools/function.py): the arguments' model and the
description from the signature and the docstring, the replay policy said or the safest, and
a call that validates what the model sent before the function runs."""

from __future__ import annotations

from datetime import date
from typing import Annotated

import pytest
from pydantic import Field

from runs.models import ReplayPolicy
from runs.tools.function import ArgumentsRejected, tool


def book(day: date, guests: Annotated[int, Field(ge=1, description="how many")] = 2) -> dict:
    """Book a table for a day."""
    return {"day": day, "guests": guests}


def test_a_functions_signature_and_docstring_are_its_tools_schema_and_description():
    made = tool(book, policy=ReplayPolicy.SAFE)

    schema = made.args.model_json_schema()
    assert (made.name, made.description) == ("book", "Book a table for a day.")
    assert schema["required"] == ["day"]
    assert schema["properties"]["day"]["format"] == "date"
    assert schema["properties"]["guests"] == {
        "default": 2,
        "description": "how many",
        "minimum": 1,
        "title": "Guests",
        "type": "integer",
    }
    assert schema["additionalProperties"] is False


def test_a_function_declared_without_a_policy_is_never_run_again_blindly_and_has_a_key():
    made = tool(book)

    assert made.policy == ReplayPolicy.NEVER
    assert made.key is not None


def test_a_call_validates_the_arguments_and_returns_json():
    made = tool(book, policy=ReplayPolicy.SAFE)

    assert made.call({"day": "2030-01-07"}, "") == {"day": "2030-01-07", "guests": 2}
    with pytest.raises(ArgumentsRejected, match="guests: Input should be greater than or equal"):
        made.call({"day": "2030-01-07", "guests": 0}, "")
    with pytest.raises(ArgumentsRejected, match="tip: Extra inputs are not permitted"):
        made.call({"day": "2030-01-07", "tip": 5}, "")


def test_an_effect_receives_its_delivery_key_and_gets_an_external_id():
    @tool(policy=ReplayPolicy.IDEMPOTENT)
    def send(to: str, delivery_key: str) -> str:
        """Send a note."""
        return f"sent to {to} under {delivery_key}"

    assert "delivery_key" not in send.args.model_json_schema()["properties"]
    assert send.call({"to": "ana"}, "k" * 64) == {
        "result": f"sent to ana under {'k' * 64}",
        "external_id": f"send-{'k' * 16}",
    }
    assert send(to="bo", delivery_key="k") == "sent to bo under k"


def test_a_function_taking_any_arguments_cannot_be_offered_to_a_model():
    def anything(*args: str) -> None: ...

    with pytest.raises(TypeError, match=r"\*args and \*\*kwargs"):
        tool(anything, policy=ReplayPolicy.SAFE)

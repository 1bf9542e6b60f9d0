"""A pipeline's inputs as a run pins them (runs/inputs.py, Pipeline.resolve_inputs): a blank
value is refused, not read as the default, and a refusal names the input at fault."""

from __future__ import annotations

import pytest

from runs.inputs import InvalidInput
from runs.pipeline import Input, Pipeline, Stage, StageOutput


def _account(value: str, known: dict) -> None:
    if not value.startswith("acct-"):
        raise InvalidInput(f"{value!r} is not an account")  # says no input: pin() names it


refunds = Pipeline(
    name="refunds",
    tools=(),
    inputs=(
        Input("account", current=lambda pinned: "acct-1", validate=_account, versioned=False),
        Input("order", versioned=False),
    ),
    stages=(Stage("only", lambda ctx: StageOutput(outputs={}), consumes=("account", "order")),),
)


@pytest.mark.parametrize("blank", ["", "  ", "\t"])
def test_a_blank_value_with_a_default_is_refused_not_read_as_the_default(blank):
    with pytest.raises(InvalidInput) as refused:
        refunds.resolve_inputs({"account": blank, "order": "o-1"})

    assert refused.value.input == "account"
    assert "leave it out to pin its default" in str(refused.value)


def test_a_blank_required_value_says_it_is_required():
    with pytest.raises(InvalidInput, match="input order is blank: give it a value") as refused:
        refunds.resolve_inputs({"order": ""})

    assert refused.value.input == "order" and "it is required" in str(refused.value)


def test_an_input_left_out_pins_its_default():
    assert refunds.resolve_inputs({"order": "o-1"}) == {"account": "acct-1", "order": "o-1"}


def test_a_validator_that_names_no_input_is_told_which_one_it_refused():
    with pytest.raises(InvalidInput, match="'bob' is not an account") as refused:
        refunds.resolve_inputs({"account": "bob", "order": "o-1"})

    assert refused.value.input == "account"

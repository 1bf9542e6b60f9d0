"""A confirmation's editable arguments (runs/gates/arguments.py): each read as its JSON type,
an untouched one kept exactly as asked, an edit checked against the tool's own schema, and
refused with what is wrong before anything is recorded."""

from __future__ import annotations

import json

import pytest
from pydantic import Field

from demo.pipeline import content_pipeline
from runs.gates import arguments, forms
from runs.models import ReplayPolicy
from runs.pipeline import Confirm, Tool
from tests.gates import pipelines as gp

CHARGE = content_pipeline.tool("charge_card")
ASKED = {"account": "acct-42", "amount": "5.00", "article": "art-1"}


def meeting_call() -> dict:
    args = {"title": "Kick-off", "attendees": list(gp.ATTENDEES), "organizer": "run-1"}
    described, _ = arguments.describe(gp.SCHEDULE, args)
    return {
        "tool": gp.SCHEDULE.name,
        "args": args,
        "editable": list(described),
        "arguments": described,
    }


def charge_call() -> dict:
    described, schema = arguments.describe(CHARGE, ASKED)
    return {
        "tool": CHARGE.name,
        "args": dict(ASKED),
        "editable": list(described),
        "arguments": described,
        "schema": schema,
    }


def test_a_list_argument_is_shown_as_json_in_a_textarea():
    call = meeting_call()

    form = forms.build(forms.confirmation_spec(call), forms.confirmation_initial(call))
    html = str(form["arg_attendees"])

    assert "<textarea" in html
    assert "&quot;pm@client.com&quot;" in html and "[&#x27;pm@client.com&#x27;" not in html


def test_an_untouched_list_is_the_recorded_value_exactly():
    call = meeting_call()
    shown = arguments.as_text(call["args"]["attendees"]).replace("\n", "\r\n")

    args = arguments.edited(call, {"attendees": shown, "title": "Kick-off"}, gp.SCHEDULE)

    assert args == call["args"]
    assert forms.diff(call["args"], args) == {}


def test_an_edited_list_stays_a_list_typed_or_as_json_text():
    call = meeting_call()
    wanted = ["pm@client.com", "ana@company.com"]

    typed = arguments.edited(call, {"attendees": wanted}, gp.SCHEDULE)
    text = arguments.edited(call, {"attendees": json.dumps(wanted)}, gp.SCHEDULE)

    assert typed["attendees"] == text["attendees"] == wanted
    assert forms.diff(call["args"], typed) == {"attendees": [gp.ATTENDEES, wanted]}


@pytest.mark.parametrize(
    "entered",
    ["['pm@client.com']", '"pm@client.com"', {"to": "pm@client.com"}, 3, "[NaN]", [float("inf")]],
)
def test_a_list_argument_refuses_anything_but_a_json_list(entered):
    with pytest.raises(arguments.EditRefused) as refused:
        arguments.edited(meeting_call(), {"attendees": entered}, gp.SCHEDULE)

    assert list(refused.value.errors) == ["attendees"]


@pytest.mark.parametrize(
    "entered", ["abc", "five", "-3", "0", "nan", "inf", "Infinity", "5000", "100.01", "1.234"]
)
def test_the_charge_refuses_an_amount_its_schema_and_ceiling_refuse(entered):
    with pytest.raises(arguments.EditRefused) as refused:
        arguments.edited(charge_call(), {"amount": entered}, CHARGE)

    assert list(refused.value.errors) == ["amount"]


@pytest.mark.parametrize("entered", ["1e2", "2E1", "0x10", "1_000"])
def test_an_amount_is_written_out_not_as_an_exponent(entered):
    with pytest.raises(arguments.EditRefused) as refused:
        arguments.edited(charge_call(), {"amount": entered}, CHARGE)

    assert refused.value.errors == {"amount": [arguments.MESSAGES["decimal"]]}


@pytest.mark.parametrize(
    ("entered", "said"),
    [
        ("abc", "must be a decimal number, like 5.00"),
        ("5,00", "with a point, not a comma"),
        ("\uff15", "in the digits 0-9"),
        ({"a": 1}, "must be a decimal number, like 5.00"),
    ],
)
def test_an_amount_that_is_no_number_is_told_what_is_wrong_with_it(entered, said):
    with pytest.raises(arguments.EditRefused) as refused:
        arguments.edited(charge_call(), {"amount": entered}, CHARGE)

    [message] = refused.value.errors["amount"]
    assert said in message and "1e2" not in message


@pytest.mark.parametrize("entered", [float("nan"), float("inf"), True, ["20"]])
def test_the_charge_refuses_typed_json_that_is_no_finite_amount(entered):
    with pytest.raises(arguments.EditRefused, match="amount"):
        arguments.edited(charge_call(), {"amount": entered}, CHARGE)


def test_the_ceiling_is_said_in_dollars():
    with pytest.raises(arguments.EditRefused) as refused:
        arguments.edited(charge_call(), {"amount": "100.01"}, CHARGE)

    assert refused.value.errors == {"amount": ["Input should be less than or equal to 100.00"]}


def test_an_edited_amount_is_written_as_the_processor_reads_it():
    assert arguments.edited(charge_call(), {"amount": "20"}, CHARGE)["amount"] == "20.00"
    assert arguments.edited(charge_call(), {"amount": 20}, CHARGE)["amount"] == "20.00"


def test_an_amount_that_comes_out_as_asked_is_no_edit():
    for same in ("5", "5.0", " 5.00 ", 5):
        assert arguments.edited(charge_call(), {"amount": same}, CHARGE) == ASKED


def test_an_edit_is_refused_where_the_tool_is_not_known():
    with pytest.raises(arguments.EditRefused) as refused:
        arguments.edited(charge_call(), {"amount": "20.00"}, None)

    assert list(refused.value.errors) == [""]
    # Approving as asked needs no tool.
    assert arguments.edited(charge_call(), {"amount": "5.00"}, None) == ASKED


def test_the_gate_records_each_editable_arguments_kind_and_rules():
    described, schema = arguments.describe(CHARGE, ASKED)

    assert described == {
        "amount": {
            "kind": "decimal",
            "rules": ["> 0", "at most 2 decimal places", "at most 10 digits", "≤ 100.00"],
        }
    }
    assert set(schema["properties"]) == {"account", "amount", "article"}


def test_the_ceiling_is_said_in_the_schema_as_json_schemas_maximum():
    # pydantic wrote it as "le": "100.00" beside the anyOf, which no JSON Schema client reads.
    _, schema = arguments.describe(CHARGE, ASKED)

    amount = schema["properties"]["amount"]
    (number,) = [o for o in amount["anyOf"] if o.get("type") == "number"]
    assert (number["maximum"], number["exclusiveMinimum"]) == (100.0, 0.0)
    assert "le" not in amount


def test_limits_are_refused_on_a_tool_without_an_args_model():
    with pytest.raises(ValueError, match="limits"):
        Tool(
            "t",
            ReplayPolicy.NEVER,
            gp.SCHEDULE.call,
            key=gp.meeting_key,
            confirm=Confirm(editable=("attendees",), limits={"attendees": Field(max_length=3)}),
        )

"""What a button does, in the words its tick names (runs/gates/acts.py): built from the
pending call a confirmation records, the same for the gate page, the bulk page and the API."""

from __future__ import annotations

from decimal import Decimal

from runs.gates.acts import act_of, money, total, with_article

CHARGE = {
    "tool": "charge_card",
    "policy": "NEVER",
    "target": "acct-7@card",
    "cost": "5.00",
    "verb": "charge",
    "args": {"amount": "5.00"},
}
PUBLISH = {
    "tool": "publish_article",
    "policy": "RECONCILE_FIRST",
    "target": "acct-42@devblog",
    "cost": "0.0000",
    "verb": "publish",
}
RENDER = {
    "tool": "render_image",
    "policy": "IDEMPOTENT",
    "target": "acct-42@renderer",
    "cost": "0",
    "verb": "call",
}


def test_a_charge_names_its_amount_and_whom_it_charges_and_needs_the_tick():
    act = act_of(CHARGE)

    assert act.text == "charges $5.00 to acct-7 (card)"
    assert act.needs_tick and act.amount == "$5.00"


def test_a_free_call_the_target_cannot_deduplicate_names_where_it_acts_and_needs_the_tick():
    act = act_of(PUBLISH)

    assert act.text == "publishes an article on devblog as acct-42"
    assert act.needs_tick and act.price == 0


def test_a_free_call_that_can_be_made_again_needs_no_tick():
    assert act_of(RENDER).needs_tick is False


def test_any_price_above_zero_needs_the_tick_whatever_the_policy():
    assert act_of(RENDER | {"cost": "0.0400"}).needs_tick is True


def test_a_question_has_no_act():
    assert act_of({}) is None


def test_a_total_counts_the_acts_and_adds_their_prices():
    assert total([act_of(CHARGE)] * 3).text == "3 charges, $15.00 in all"
    assert total([act_of(CHARGE)]).text == "1 charge, $5.00 in all"


def test_money_shows_cents_and_the_ledgers_four_places_only_when_the_price_has_them():
    assert [money(Decimal(v)) for v in ("5", "0.0400", "0.001", "1234.5")] == [
        "$5.00",
        "$0.04",
        "$0.0010",
        "$1,234.50",
    ]


def test_a_call_not_made_yet_names_its_act_without_a_target():
    unknown = {k: v for k, v in CHARGE.items() if k != "target"}
    assert act_of(unknown).text == "charges $5.00"
    assert act_of({**PUBLISH, "target": ""}).text == "publishes an article"


def test_a_role_is_named_with_its_article():
    assert [with_article(r) for r in ("operator", "supervisor", "viewer")] == [
        "an operator",
        "a supervisor",
        "a viewer",
    ]

"""One format per quantity (runs/quantities.py): money in cents, or the ledger's four places
when an amount has a fraction of a cent; token counts with thousands separators. The template
filters are these functions, so a page cannot say an amount another way."""

from __future__ import annotations

from decimal import Decimal

from django.template import Context, Template

from runs import quantities


def test_money_reads_in_cents_unless_the_amount_has_a_fraction_of_a_cent():
    said = [quantities.money(v) for v in ("5", "5.0000", 5, Decimal("0.0400"), "0.001")]
    assert said == ["$5.00", "$5.00", "$5.00", "$0.04", "$0.0010"]


def test_the_same_amount_reads_the_same_whatever_places_it_was_stored_with():
    # "$5.001 beside $5.0010", "115.943000000000" beside "5" (issue 48): one amount, one text.
    assert {quantities.money(v) for v in ("5.001", "5.0010", Decimal("5.00100000"))} == {"$5.0010"}
    assert quantities.amount("115.943000000000") == "115.9430"
    assert quantities.amount("5") == "5.00"


def test_money_for_people_has_separators_and_a_sign_machines_get_neither():
    assert quantities.money("-1234.5") == "-$1,234.50"
    assert quantities.amount("-1234.5") == "-1234.50"


def test_what_is_not_an_amount_is_said_as_it_is():
    assert [quantities.money(v) for v in (None, "", "n/a", "NaN")] == ["", "", "n/a", "NaN"]


def test_token_counts_have_thousands_separators():
    assert [quantities.tokens(v) for v in (0, 999, 1234, "1234567")] == [
        "0",
        "999",
        "1,234",
        "1,234,567",
    ]


def test_the_templates_money_and_tokens_filters_are_these_formats():
    page = Template("{% load runs_extras %}{{ a|money }} {{ b|money }} {{ n|tokens }}")
    said = page.render(Context({"a": "5.0000", "b": Decimal("0.001"), "n": 12345}))
    assert said == "$5.00 $0.0010 12,345"


def test_an_amount_longer_than_decimals_28_digits_is_shown_not_raised():
    huge = "9" * 41

    assert quantities.money(huge) == f"${int(huge):,}.00"
    assert quantities.amount(huge) == f"{huge}.00"
    assert quantities.money(Decimal(huge + ".001")) == f"${int(huge):,}.0010"

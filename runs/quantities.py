"""One format per quantity, for every face: money, and a model's token counts.

Money is USD, the one currency every price in Resumer is in, and it reads one way wherever it
is shown: in cents ("$5.00", "$0.04"), and with the ledger's four places only when an amount
has a fraction of a cent in it ("$0.0010", "$5.0010"). Why not cents alone: an asset upload
costs $0.001 and a model call's tokens often less, so rounding to cents would show a paid call
as free and two resumes of different cost as the same. Why not four places always: what
people weigh at a button is mostly whole cents ("charges $5.00"), and "$5.0000" buries it.
The ledger keeps four places (Effect.cost), so nothing shown is ever rounded away. Pages and
the command line add the sign and thousands separators (`money`); the API gives the same
places as an exact decimal string without them (`amount`: "5.00", "0.0010").

Token counts are whole numbers: "1,234" on pages and the command line (`tokens`), an integer
in the API.

May import: nothing of runs."""

from __future__ import annotations

from decimal import Context, Decimal, InvalidOperation, getcontext
from typing import Any

CENT = Decimal("0.01")
# The ledger's precision (Effect.cost and the plan's figures keep four places).
LEDGER = Decimal("0.0001")


def decimal(value: Any) -> Decimal | None:
    """A money value as a finite Decimal ("5", 5, Decimal("5.0000")), or None when it is not
    one."""
    try:
        found = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError, TypeError):
        return None
    return found if found.is_finite() else None


def at(value: Decimal, places: Decimal = LEDGER) -> Decimal:
    """`value` at `places` (the ledger's four by default). Decimal's default context holds 28
    digits and refuses to quantize a longer number (InvalidOperation): a reviewer's or an
    argument's 41-digit amount would make every page showing it a 500. The context here is as
    wide as the number needs (made only for such a number: every amount on a page comes here)."""
    needs = value.adjusted() - places.as_tuple().exponent + 2
    if needs <= getcontext().prec:
        return value.quantize(places)
    return value.quantize(places, context=Context(prec=needs))


def places(value: Decimal) -> Decimal:
    """The amount at the places it is shown with: cents, or the ledger's four when it has a
    fraction of a cent."""
    exact = at(value)
    return exact if exact != at(exact, CENT) else at(exact, CENT)


def amount(value: Any) -> str:
    """Money for machines: "5.00", "0.0010", "-1234.50" (the API's Money)."""
    found = decimal(value)
    if found is None:
        return "" if value is None else str(value)
    return f"{places(found):f}"


def money(value: Any) -> str:
    """Money for people: "$5.00", "$0.0010", "$1,234.50", "-$2.00"."""
    found = decimal(value)
    if found is None:
        return "" if value is None else str(value)
    shown = places(found)
    return f"{'-' if shown < 0 else ''}${shown.copy_abs():,f}"


def tokens(value: Any) -> str:
    """A token count for people: "1,234"."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)

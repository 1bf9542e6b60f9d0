"""What a button does to the outside world, in words a person ticks before pressing it:
"charges $5.00 to acct-42 (card)", "publishes an article on devblog as acct-42". Built from a pending
call as a confirmation gate records it (its verb, price, policy and target), so the gate
page, the bulk page and the API say the same, and later any other button that makes a call
can reuse it.

A call needs the tick when it costs money or cannot simply be made again: a price above
zero, or a RECONCILE_FIRST or NEVER policy. A rejection needs no tick (nothing is done)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django import forms

from runs import quantities
from runs.gates.forms import APPROVE, RawCheckbox
from runs.models import ReplayPolicy

# The answer's field that carries the tick (the gate's form gains it when the act needs it).
TICK = "confirm_act"
GUARDED = (ReplayPolicy.RECONCILE_FIRST, ReplayPolicy.NEVER)


def third_person(verb: str) -> str:
    """ "charge" → "charges", "ask the model" → "asks the model"."""
    word, space, rest = verb.partition(" ")
    if word.endswith(("s", "sh", "ch", "x", "z")):
        return f"{word}es{space}{rest}"
    return f"{word}s{space}{rest}"


def with_article(word: str) -> str:
    """ "operator" → "an operator", "supervisor" → "a supervisor"."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


money = quantities.money


def noun(tool: str, verb: str) -> str:
    """What a tool named for its act makes, with its article: "an article" of
    publish_article; "" for a tool whose name says no more than its verb."""
    thing = tool.removeprefix(f"{verb}_").replace("_", " ") if tool.startswith(f"{verb}_") else ""
    if not thing:
        return ""
    return f"{'an' if thing[0] in 'aeiou' else 'a'} {thing}"


def _price(call: dict[str, Any]) -> Decimal:
    return quantities.decimal(call.get("cost") or 0) or Decimal(0)


@dataclass(frozen=True)
class Act:
    verb: str
    price: Decimal
    # "charges $5.00 to acct-42 (card)": what the tick names.
    text: str
    needs_tick: bool

    @property
    def amount(self) -> str:
        return money(self.price)


def act_of(call: dict[str, Any]) -> Act | None:
    """The act of a call: a confirmation's pending call, or a plan's line (runs/planning/
    acts.py), from its verb, price, policy, tool and target ("account@platform"; a call not
    made yet may have none: "charges $5.00", "publishes an article"). None for a gate with no
    call (a question)."""
    if not call:
        return None
    verb = str(call.get("verb") or "call")
    price = _price(call)
    account, _, platform = str(call.get("target") or "").partition("@")
    if price > 0:
        text = f"{third_person(verb)} {money(price)}"
        text += f" to {account or platform}" if account or platform else ""
        text += f" ({platform})" if platform and account else ""
    else:
        what = noun(str(call.get("tool", "")), verb)
        text = " ".join(w for w in (third_person(verb), what) if w)
        if platform or account:
            text += f" on {platform or account}" + (f" as {account}" if platform else "")
        elif not what:
            text += f" on {call.get('tool', '')}"
    needs_tick = price > 0 or call.get("policy") in GUARDED
    return Act(verb, price, text, needs_tick)


@dataclass(frozen=True)
class Total:
    count: int
    price: Decimal
    # "3 charges, $15.00 in all"
    text: str


def total(acts: Iterable[Act]) -> Total:
    acts = list(acts)
    price = sum((a.price for a in acts), Decimal(0))
    verbs = {a.verb for a in acts}
    verb = verbs.pop() if len(verbs) == 1 else "call"
    noun = verb if len(acts) == 1 else third_person(verb)
    return Total(len(acts), price, f"{len(acts)} {noun}, {money(price)} in all")


class TickField(forms.BooleanField):
    """The tick as each face sends it: a browser's checkbox (and the command line) "on", the
    API's JSON true. Django's BooleanField reads any text but "false" and "0" as ticked, so
    "off" or "no" through the API would approve a charge: here anything else that is not
    left out (false, null, "") is an error of the box, and nothing is answered."""

    widget = RawCheckbox

    def to_python(self, value: Any) -> bool:
        if value is True or value == "on":
            return True
        if value in (None, False, ""):
            return False
        raise forms.ValidationError(
            "Tick the box to approve (true through the API), or leave it out; "
            f"{value!r} is neither."
        )


def add_tick(form: forms.Form, says: str, fewer: str = "") -> None:
    """The box an approval must tick, naming what approving does; `fewer`, what answering
    only some of many gates does instead (a bulk page's)."""
    form.fields[TICK] = TickField(
        required=False,
        label=f"I confirm that approving {says}",
        help_text=f"needed to approve{'; ' + fewer if fewer else ''}; a rejection needs no tick",
    )


def tick_missing(form: forms.Form) -> bool:
    """Whether a cleaned form approves without the tick its act needs; the form then carries
    the error beside the box. Every face's answer goes through this (one gate, or many), on
    a form other fields made invalid too, so that every mistake is said at once."""
    if TICK not in form.fields or form.cleaned_data.get("decision") != APPROVE:
        return False
    if form.cleaned_data.get(TICK) or TICK in form.errors:
        return False
    form.add_error(TICK, f"Tick “{form.fields[TICK].label}” to approve.")
    return True

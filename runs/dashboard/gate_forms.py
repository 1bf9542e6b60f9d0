"""Forms of the gate pages that are the dashboard's own: which gates a bulk answer is for, and
the shared answer it gives them. A gate's own form is the gate's (runs/gates/forms.py): the
view rebuilds it from what GATE_OPENED recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms

from runs import ids
from runs.gates import forms as gate_forms
from runs.gates.acts import Act, Total, act_of, add_tick, tick_missing, total
from runs.gates.shared import Shared, shared
from runs.models import Gate
from runs.quantities import money

MAX_GATES = 1000


def _pks(values: list[str], what: str) -> list[int]:
    pks = []
    for value in values:
        pk = ids.parse_pk(str(value))
        if pk is None:
            raise forms.ValidationError(f"{what}: {str(value).strip()[:20]!r} is not a gate id.")
        pks.append(pk)
    if len(pks) > MAX_GATES:
        raise forms.ValidationError(f"{what}: at most {MAX_GATES} gates at once.")
    return list(dict.fromkeys(pks))


class GateIdsField(forms.Field):
    """Gate ids, from ticked checkboxes (`gates`) or one comma-separated hidden field."""

    widget = forms.MultipleHiddenInput

    def __init__(self, *, what: str, **kwargs: Any) -> None:
        self.what = what
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> list[int]:
        if value in self.empty_values:
            return []
        values = value if isinstance(value, list | tuple) else str(value).split(",")
        return _pks([v for v in values if str(v).strip()], self.what)


class BulkScopeForm(forms.Form):
    """Which of the group's gates the answer is for: every gate the page showed, or the
    ticked ones. A gate that joined the group after the page was shown is left alone."""

    scope = forms.ChoiceField(choices=[("all", "all shown"), ("selected", "the ticked ones")])
    shown = GateIdsField(what="shown", required=True)
    gates = GateIdsField(what="gates", required=False)

    def __init__(self, data: Any = None, **kwargs: Any) -> None:
        if data is not None and hasattr(data, "getlist"):
            data = {
                "scope": data.get("scope", ""),
                "shown": data.get("shown", ""),
                "gates": data.getlist("gates"),
            }
        super().__init__(data, **kwargs)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("scope") == "selected" and not data.get("gates"):
            raise forms.ValidationError("Tick the gates to answer, or answer all shown.")
        shown = set(data.get("shown") or [])
        if any(pk not in shown for pk in data.get("gates") or []):
            raise forms.ValidationError("A ticked gate was not on the page.")
        return data

    def gate_pks(self) -> list[int]:
        data = self.cleaned_data
        return data["gates"] if data["scope"] == "selected" else data["shown"]


BULK_PREFIX = "answer"
DIGEST_PREFIX = "digest-"


@dataclass
class BulkAnswer:
    """The one answer given to the gates a page showed: only what they share (approve or
    reject with a shared reason, and the fields every gate shows alike, prefilled), and when
    approving makes calls that cost money or cannot simply be made again, the tick that names
    them and their total."""

    form: forms.Form
    shared: Shared
    # Each gate's pending call as an act (a confirmation's), and their total.
    acts: list[tuple[Gate, Act]]
    total: Total | None

    def is_valid(self) -> bool:
        return self.form.is_valid() and not tick_missing(self.form)

    def data(self) -> dict[str, Any]:
        """The answer as each gate's own form reads it (unprefixed)."""
        form = self.form
        return {name: form.data.get(form.add_prefix(name), "") for name in form.fields}


def bulk_answer(gates: list[Gate], data: Any = None) -> BulkAnswer:
    common = shared(gates)
    form = gate_forms.build(common.spec, common.initial, data=data, prefix=BULK_PREFIX)
    pending = [(g, a) for g in gates if (a := act_of(g.call)) is not None]
    total_of = total(a for _, a in pending) if pending else None
    if total_of is not None and any(a.needs_tick for _, a in pending):
        # The total is of every gate shown; answering the ticked ones makes theirs alone.
        prices = {a.price for _, a in pending}
        each = f", {money(prices.pop())} each" if len(prices) == 1 else ""
        add_tick(
            form, f"makes {total_of.text}", f"answering the ticked gates only makes theirs{each}"
        )
    return BulkAnswer(form, common, pending, total_of)


def digests(data: Any, pks: list[int]) -> dict[int, str]:
    """Each gate's digest as the page showed it (one hidden field per gate); "" if missing,
    which no gate's digest is."""
    return {pk: str(data.get(f"{DIGEST_PREFIX}{pk}", ""))[:64] for pk in pks}

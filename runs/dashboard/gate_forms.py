"""Forms of the gate pages that are the dashboard's own: which gates a bulk answer is for, and
the shared answer it gives them. A gate's own form is the gate's (runs/gates/forms.py): the
view rebuilds it from what GATE_OPENED recorded."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from runs.gates import forms as gate_forms
from runs.models import Gate, GateKind

_PK = re.compile(r"^[0-9]{1,18}$")
MAX_GATES = 1000


def _pks(values: list[str], what: str) -> list[int]:
    pks = []
    for value in values:
        value = str(value).strip()
        if not _PK.match(value) or int(value) < 1:
            raise forms.ValidationError(f"{what}: {value[:20]!r} is not a gate id.")
        pks.append(int(value))
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


def bulk_answer_form(gate: Gate, data: Any = None) -> forms.Form:
    """The one answer given to every gate of a group, built from the first gate's form: for
    a confirmation the decision and the reason only (each run's own call is made as it was
    asked: no edits in bulk); for a question the whole form, without any run's own values."""
    spec = gate.form
    initial: dict[str, Any] = {}
    if gate.kind == GateKind.CONFIRM:
        spec = [s for s in spec if not s["name"].startswith("arg_")]
        initial = {"decision": gate_forms.APPROVE}
    return gate_forms.build(spec, initial, data=data, prefix=BULK_PREFIX)


def bulk_answer_data(form: forms.Form) -> dict[str, Any]:
    """The answer as each gate's own form reads it (unprefixed), from a valid bulk form."""
    return {name: form.data.get(form.add_prefix(name), "") for name in form.fields}

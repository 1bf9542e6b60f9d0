"""The inbox's filters as a request sends them (a query string), checked into
`InboxFilters`: the dashboard's inbox and the API's list of runs read them with this one form,
so a filter means the same and is refused in the same words on both faces."""

from __future__ import annotations

from typing import Any

from django import forms

from runs import ids
from runs.models import Run
from runs.pipeline import registry
from runs.reads.inbox import InboxFilters, stage_choices
from runs.reads.stops import ReasonKind


class PkField(forms.Field):
    """A primary key in a query string (runs/ids.py parse_pk): anything else, a number too
    large for the database among them, is a form error, never a database error."""

    widget = forms.HiddenInput
    default_error_messages = {
        "invalid": f"Not an id: expected a number from 1 to {ids.MAX_DIGITS} digits."
    }

    def to_python(self, value: Any) -> int | None:
        if value in self.empty_values:
            return None
        pk = ids.parse_pk(str(value))
        if pk is None:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return pk


class InboxFilterForm(forms.Form):
    q = forms.CharField(
        label="Run id",
        required=False,
        max_length=40,
        widget=forms.TextInput(attrs={"placeholder": "run-123", "inputmode": "search"}),
    )
    status = forms.ChoiceField(label="Status", required=False)
    pipeline = forms.ChoiceField(label="Pipeline", required=False)
    stage = forms.ChoiceField(label="Stage", required=False)
    reason = forms.ChoiceField(
        label="Why it stopped",
        required=False,
        choices=[("", "Any")] + list(ReasonKind.choices),
        error_messages={
            "invalid_choice": "Choose why runs stopped: "
            + ", ".join(ReasonKind.values)
            + ", or any."
        },
    )
    # The id of the last run of the previous page (keyset paging).
    after = PkField(required=False)
    # The runs of one notification: the link in a message about many runs (runs/notify.py).
    notice = PkField(required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        anything = [("", "Any")]
        self.fields["status"].choices = anything + list(Run.Status.choices)
        self.fields["pipeline"].choices = anything + [(p, p) for p in registry.names()]
        self.fields["stage"].choices = anything + [(s, s) for s in stage_choices()]

    def clean_q(self) -> int | None:
        value = self.cleaned_data["q"].strip()
        if not value:
            return None
        pk = ids.parse_run_id(value, bare=True)
        if pk is None:
            raise forms.ValidationError("Search by run id, for example run-123.")
        return pk

    def filters(self) -> InboxFilters:
        data = self.cleaned_data
        return InboxFilters(
            status=data.get("status") or "",
            pipeline=data.get("pipeline") or "",
            stage=data.get("stage") or "",
            run_pk=data.get("q"),
            notice=data.get("notice"),
            reason=data.get("reason") or "",
        )

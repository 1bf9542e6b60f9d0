"""Forms: the inbox filters, the approval of a plan, and the supervisor's ledger edit."""

from __future__ import annotations

from typing import Any

from django import forms

from runs import queries, stats
from runs.edits import EDITABLE_EFFECT_FIELDS, MAX_EDIT_REASON_CHARS
from runs.models import Effect, Run
from runs.pipeline import registry
from runs.resume import STRICT, UPGRADE


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
    # The id of the last run of the previous page (keyset paging).
    after = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    # The runs of one notification: the link in a message about many runs (runs/notify.py).
    notice = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        anything = [("", "Any")]
        self.fields["status"].choices = anything + list(Run.Status.choices)
        self.fields["pipeline"].choices = anything + [(p, p) for p in registry.names()]
        self.fields["stage"].choices = anything + [(s, s) for s in queries.stage_choices()]

    def clean_q(self) -> int | None:
        value = self.cleaned_data["q"].strip()
        if not value:
            return None
        pk = Run.pk_from_public_id(value if value.startswith("run-") else f"run-{value}")
        if pk is None:
            raise forms.ValidationError("Search by run id, for example run-123.")
        return pk

    def filters(self) -> queries.InboxFilters:
        data = self.cleaned_data
        return queries.InboxFilters(
            status=data.get("status") or "",
            pipeline=data.get("pipeline") or "",
            stage=data.get("stage") or "",
            run_pk=data.get("q"),
            notice=data.get("notice"),
        )


class PipelineWindowForm(forms.Form):
    """How many of a pipeline's most recent runs its page looks at (`?runs=100`)."""

    runs = forms.TypedChoiceField(
        label="Look at the last",
        choices=[(n, f"{n} runs") for n in stats.WINDOWS],
        coerce=int,
        error_messages={
            "invalid_choice": "Choose how many recent runs to look at: "
            + ", ".join(str(n) for n in stats.WINDOWS)
            + "."
        },
    )

    def __init__(self, data: Any = None, **kwargs: Any) -> None:
        # No parameter means the default window, shown as selected in the form.
        data = data.copy() if data is not None else {}
        data.setdefault("runs", str(stats.DEFAULT_WINDOW))
        super().__init__(data, **kwargs)


class ApproveForm(forms.Form):
    action = forms.ChoiceField(choices=[(STRICT, "Strict resume"), (UPGRADE, "Upgrade")])
    fingerprint = forms.RegexField(regex=r"^[0-9a-f]{64}$", max_length=64)
    # The confirmation step that works without JavaScript: the operator ticks it after
    # reading what the button will do.
    confirm = forms.BooleanField(
        label="I have read the plan",
        error_messages={"required": "Tick “I have read the plan” to confirm."},
    )


class EffectLedgerForm(forms.ModelForm):
    """A supervisor's correction of one effect. It only validates what was typed: EffectAdmin
    applies it through edits.edit_effect() (reason required, the run's lease taken,
    LEDGER_EDITED appended), never a plain save."""

    reason = forms.CharField(
        label="Reason",
        max_length=MAX_EDIT_REASON_CHARS,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Why this correction is right (e.g. “checked with the card processor: "
        "no charge was made”). Recorded in the run's event log with your user name.",
    )
    # Set per request by the admin when the ledger refused this very submission (the run
    # became active, a worker holds its lease, nothing changed): shown as the form's error.
    refusal = ""

    class Meta:
        model = Effect
        fields = list(EDITABLE_EFFECT_FIELDS)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.refusal:
            raise forms.ValidationError(self.refusal)
        return cleaned

    def is_valid(self) -> bool:
        if super().is_valid():
            return True
        self._restore_instance()
        return False

    def changes(self) -> dict[str, Any]:
        """The fields the supervisor changed, with their new values."""
        return {
            name: self.cleaned_data[name]
            for name in EDITABLE_EFFECT_FIELDS
            if name in self.changed_data
        }

    def _restore_instance(self) -> None:
        # Validation copied the submitted values onto the instance; the page that shows the
        # error names the effect by it ("charge_card:promote-charge [failed]"), which must
        # say what the ledger holds, not what was refused.
        for name in EDITABLE_EFFECT_FIELDS:
            if name in self.initial:
                setattr(self.instance, name, self.initial[name])

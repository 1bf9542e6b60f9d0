"""Forms: the inbox's poll for news, the run page's poll for its timeline, the pipeline page's window, the approval of a plan, the
ways out of a failed answer (Ask again, close out), and the supervisor's ledger edit. The
inbox's filters are shared with the API (runs/reads/filters.py)."""

from __future__ import annotations

from typing import Any

from django import forms

from runs import ids
from runs.gates.acts import TickField
from runs.ledger.edits import EDITABLE_EFFECT_FIELDS
from runs.ledger.reasons import MAX_REASON_CHARS
from runs.models import ApprovalMode, Effect
from runs.planning.grouping import FINGERPRINT_RE
from runs.reads import pipeline_stats as stats
from runs.reads.filters import InboxFilterForm, PkField
from runs.reads.live import FOLLOWS, Seen


class InboxNewsForm(InboxFilterForm):
    """The inbox's poll for news: its filters, and when the rows it shows were read."""

    since = forms.DateTimeField(
        error_messages={"invalid": "Not a time: the page sends when it read its rows."}
    )


def _count() -> forms.IntegerField:
    return forms.IntegerField(min_value=0, max_value=2**62)


class TimelinePollForm(forms.Form):
    """The run page's poll form: what the page shows of its timeline (runs/reads/live.py).
    A form that does not parse gets the whole timeline again, as a reload would."""

    since = _count()
    seen = forms.CharField(max_length=40, required=False)
    beat = _count()
    settled = _count()
    tail = _count()
    follows = forms.ChoiceField(choices=[(value, value) for value in FOLLOWS])

    def seen_value(self) -> Seen:
        data = dict(self.cleaned_data)
        return Seen(state=data.pop("seen"), **data)


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


class FingerprintField(forms.RegexField):
    """A plan's or a group's fingerprint as the page sends it back: 64 hexadecimal characters
    (runs/planning/grouping.py)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(regex=FINGERPRINT_RE, max_length=64, **kwargs)


class ApproveForm(forms.Form):
    # Posted as "action", the name PLAN_APPROVED records the mode under.
    action = forms.TypedChoiceField(choices=ApprovalMode.choices, coerce=ApprovalMode)
    fingerprint = FingerprintField(
        error_messages={
            "invalid": "This is not a plan's fingerprint: reload the plan and approve it again."
        },
    )
    # The confirmation step that works without JavaScript: each option has its own box,
    # ticked after reading what that button will do (an upgrade's box names its
    # irreversible acts), so one tick never confirms the other option.
    # A tick is a browser's "on": "off" or "no" is an error, not a tick (gates/acts.py).
    confirm = TickField(required=False)

    CONFIRM_ERRORS = {
        ApprovalMode.STRICT: "Tick “I have read the plan” to confirm.",
        ApprovalMode.UPGRADE: "Tick the box beside Upgrade, which says what the new branch "
        "does to the outside world, to confirm.",
    }

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        action = cleaned.get("action")
        if action is not None and not cleaned.get("confirm"):
            self.add_error("confirm", self.CONFIRM_ERRORS[action])
        return cleaned


class CloseOutForm(forms.Form):
    """Closing a stopped run out: the reason is recorded in its chain (close_out.py checks it
    again, for every face)."""

    reason = forms.CharField(
        max_length=MAX_REASON_CHARS,
        error_messages={"required": "Say why the run is closed out: the reason is recorded."},
    )


class AskAgainForm(forms.Form):
    """Which refused confirmation to ask again (the run page names its gate)."""

    gate = PkField()


class RunIdsField(forms.Field):
    """Run ids as the group page sends them: one value per ticked box ("run-12" or "12"), or
    one comma-separated value (the runs the page showed)."""

    widget = forms.MultipleHiddenInput
    default_error_messages = {
        "invalid": "%(value)s is not a run id (e.g. run-123).",
        "too_many": "At most %(max)s runs in one approval.",
    }
    MAX_RUNS = 10_000

    def to_python(self, value: Any) -> list[int]:
        values = value.split(",") if isinstance(value, str) else list(value or [])
        values = [str(item).strip() for item in values if str(item).strip()]
        if len(values) > self.MAX_RUNS:
            raise forms.ValidationError(
                self.error_messages["too_many"], code="too_many", params={"max": self.MAX_RUNS}
            )
        pks = []
        for text in values:
            pk = ids.parse_run_id(text, bare=True)
            if pk is None:
                raise forms.ValidationError(
                    self.error_messages["invalid"], code="invalid", params={"value": text[:40]}
                )
            pks.append(pk)
        return pks


GROUP_SCOPES = [("all", "Every run shown"), ("selected", "The ticked runs")]


class GroupApproveForm(forms.Form):
    """The approval of a group of runs (runs/planning/triage.py): the group fingerprint that
    was read, and either every run the page showed (`shown`, one comma-separated field
    whatever the group's size) or the ticked ones. A run that left the group since the page
    was shown is not a form error: approve_group skips it and lists its fresh plan. A run that
    joined the group since is not approved: nobody saw it."""

    action = forms.TypedChoiceField(choices=ApprovalMode.choices, coerce=ApprovalMode)
    fingerprint = FingerprintField(
        error_messages={
            "invalid": "This is not a group's fingerprint (64 hexadecimal characters): "
            "reload the group and approve it again.",
            "max_length": "This is not a group's fingerprint (64 hexadecimal characters): "
            "reload the group and approve it again.",
            "required": "The form did not say which group it approves: reload the group.",
        },
    )
    scope = forms.ChoiceField(choices=GROUP_SCOPES)
    shown = RunIdsField(required=False, widget=forms.HiddenInput)
    runs = RunIdsField(required=False)
    confirm = TickField(
        label="I have read the group's plan",
        error_messages={"required": "Tick “I have read the group's plan” to confirm."},
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        scope = cleaned.get("scope")
        if scope == "selected" and not cleaned.get("runs"):
            self.add_error("runs", "Tick at least one run to approve.")
        elif scope == "all" and not cleaned.get("shown"):
            self.add_error("shown", "The page did not say which runs it showed; reload it.")
        return cleaned

    def run_ids(self) -> list[int]:
        data = self.cleaned_data
        return data["runs"] if data["scope"] == "selected" else data["shown"]


class EffectLedgerForm(forms.ModelForm):
    """A supervisor's correction of one effect. It only validates what was typed: EffectAdmin
    applies it through edits.edit_effect() (reason required, the run's lease taken,
    LEDGER_EDITED appended), never a plain save."""

    reason = forms.CharField(
        label="Reason",
        max_length=MAX_REASON_CHARS,
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
        if (
            cleaned.get("status") == Effect.Status.CONFIRMED
            and "external_id" not in self.errors  # one typed and refused: said once
            and not (cleaned.get("external_id") or "").strip()
        ):
            # The ledger's rule, in its words, beside the field (the database's constraint
            # says the same to a program, not to a person: see _get_validation_exclusions).
            self.add_error(
                "external_id",
                "A confirmed effect needs the external id it produced: what the target "
                "holds (ask it from the effect's page), e.g. ch-2.",
            )
        return cleaned

    def _get_validation_exclusions(self) -> Any:
        # The model's check constraint on (status, external_id) is clean()'s rule above;
        # left to the model it would show as "Constraint … is violated".
        exclusions = super()._get_validation_exclusions()
        exclusions.add("external_id")
        return exclusions

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

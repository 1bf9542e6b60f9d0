"""A gate's form as the event records it (runs/gates/forms.py): rebuilt in another process,
it refuses what the stage's own form refused and accepts what the stage showed."""

from __future__ import annotations

from decimal import Decimal

from django import forms

from runs.gates.forms import as_shown, build, class_path, describe, diff, jsonable


class RefundForm(forms.Form):
    amount = forms.DecimalField(min_value=Decimal("0.01"), max_value=100, decimal_places=2)
    items = forms.IntegerField(min_value=1, max_value=10)


def rebuilt(data: dict) -> forms.Form:
    return build(describe(RefundForm), {"amount": "12.50", "items": 2}, data=data)


def test_a_decimal_field_is_recorded_as_a_decimal_with_its_limits():
    spec = {s["name"]: s for s in describe(RefundForm)}

    assert spec["amount"]["type"] == "decimal"
    assert (spec["amount"]["min_value"], spec["amount"]["max_value"]) == ("0.01", "100")
    assert spec["amount"]["decimal_places"] == 2
    assert (spec["items"]["type"], spec["items"]["min_value"], spec["items"]["max_value"]) == (
        "integer",
        1,
        10,
    )


def test_the_rebuilt_form_accepts_the_decimal_value_the_stage_showed():
    form = rebuilt({"amount": "12.50", "items": "2"})

    assert form.is_valid(), form.errors
    assert form.cleaned_data == {"amount": Decimal("12.50"), "items": 2}


def test_the_rebuilt_form_refuses_numbers_outside_the_stages_limits():
    for data, field in (
        ({"amount": "-5", "items": "2"}, "amount"),
        ({"amount": "9" * 41, "items": "2"}, "amount"),
        ({"amount": "1.001", "items": "2"}, "amount"),
        ({"amount": "5", "items": "-40"}, "items"),
        ({"amount": "5", "items": "11"}, "items"),
    ):
        form = rebuilt(data)
        assert not form.is_valid() and list(form.errors) == [field], (data, form.errors)


def test_a_description_recorded_without_limits_rebuilds_without_them():
    spec = [
        {"name": "n", "type": "integer", "label": "N", "required": True, "help": ""},
        {"name": "d", "type": "decimal", "label": "D", "required": True, "help": ""},
    ]

    form = build(spec, {}, data={"n": "-40", "d": "-5.5"})

    assert form.is_valid(), form.errors


class ApproveForm(forms.Form):
    approved = forms.BooleanField(required=False)
    amount = forms.DecimalField(decimal_places=2)


def approve_form(data: dict) -> forms.Form:
    return build(describe(ApproveForm), {"approved": False, "amount": 40.0}, data=data)


def answered(value) -> bool:
    form = approve_form({"approved": value, "amount": "40"})
    assert form.is_valid(), (value, form.errors)
    return form.cleaned_data["approved"]


def test_a_yes_or_no_field_reads_no_as_no_and_refuses_what_is_neither():
    said = {
        value: answered(value)
        for value in (True, "on", "yes", "true", False, "no", "off", "false", "", None)
    }
    assert [v for v, answer in said.items() if answer] == [True, "on", "yes", "true"]
    for value in ("maybe", [], ["yes"], 1):
        form = approve_form({"approved": value, "amount": "40"})
        assert not form.is_valid() and list(form.errors) == ["approved"], value


def test_an_untouched_answer_has_no_diff_even_when_shown_as_a_float():
    form = approve_form({"approved": False, "amount": "40.0"})
    assert form.is_valid(), form.errors

    shown = as_shown(form, {"approved": False, "amount": 40.0})

    assert diff(shown, jsonable(form.cleaned_data)) == {}
    assert diff(shown, {"approved": False, "amount": "41.0"}) == {"amount": ["40.0", "41.0"]}


class NotedForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Go"), ("request_changes", "Redo")])
    notes = forms.CharField(required=False)

    def clean(self) -> dict:
        cleaned = super().clean()
        if cleaned.get("decision") == "request_changes" and not cleaned.get("notes"):
            self.add_error("notes", "Say what to change.")
        return cleaned

    def clean_notes(self) -> str:
        return self.cleaned_data["notes"].strip()


class NotedFormChanged(forms.Form):
    """NotedForm as it might read after a deploy: a field more, and a rule nobody was shown."""

    decision = forms.ChoiceField(choices=[("approve", "Go"), ("request_changes", "Redo")])
    notes = forms.CharField(required=False)
    urgent = forms.BooleanField(required=False)

    def clean(self) -> dict:
        raise forms.ValidationError("a rule the reviewer's form did not have")


class NotedFormWithArguments(NotedForm):
    def __init__(self, data=None, *, user, **kwargs) -> None:
        super().__init__(data, **kwargs)


def noted(data: dict, form_class: str) -> forms.Form:
    return build(describe(NotedForm), {"decision": "approve"}, data=data, form_class=form_class)


def test_the_stage_forms_own_clean_rules_the_rebuilt_form():
    form = noted({"decision": "request_changes", "notes": "  "}, class_path(NotedForm))

    assert not form.is_valid()
    assert form.errors == {"notes": ["Say what to change."]}


def test_the_stage_forms_clean_methods_shape_what_the_answer_holds():
    form = noted({"decision": "request_changes", "notes": "  shorter  "}, class_path(NotedForm))

    assert form.is_valid(), form.errors
    assert form.cleaned_data == {"decision": "request_changes", "notes": "shorter"}


def test_a_form_class_that_changed_since_the_gate_was_asked_does_not_rule(caplog):
    # The path now names a class describing other fields: only the recorded fields check.
    form = noted({"decision": "request_changes", "notes": ""}, class_path(NotedFormChanged))

    assert form.is_valid(), form.errors
    assert "NotedFormChanged changed since the gate was asked" in caplog.text


def test_a_form_class_that_cannot_be_found_here_leaves_the_fields_checks_alone():
    for path in ("tests.gates.test_gate_forms.Gone", "nowhere.Form", "tests.gates.test_gate_forms"):
        form = noted({"decision": "request_changes", "notes": ""}, path)
        assert form.is_valid(), (path, form.errors)
        assert not noted({"decision": "x"}, path).is_valid()


def test_a_form_class_whose_init_needs_its_own_arguments_leaves_the_fields_checks_alone():
    form = noted({"decision": "request_changes"}, class_path(NotedFormWithArguments))

    assert form.is_valid(), form.errors


def test_a_form_class_is_recorded_where_another_process_imports_it():
    assert class_path(NotedForm) == "tests.gates.test_gate_forms.NotedForm"


class DraftForm(forms.Form):
    to = forms.EmailField()
    body = forms.CharField(widget=forms.Textarea, min_length=10, max_length=2000)


def drafted(data: dict, form_class: str = "") -> forms.Form:
    shown = {"to": "ana@example.com", "body": "Thanks for writing."}
    return build(describe(DraftForm), shown, data=data, form_class=form_class)


def test_the_stage_fields_own_checks_rule_the_rebuilt_form():
    form = drafted({"to": "not-an-email", "body": "short"}, class_path(DraftForm))

    assert not form.is_valid()
    assert sorted(form.errors) == ["body", "to"]
    assert len(form.errors["body"]) == 1  # the min length, once; no doubled max length


def test_the_stage_fields_checks_take_a_good_answer():
    form = drafted(
        {"to": "bo@example.com", "body": "Thanks, see you Monday."}, class_path(DraftForm)
    )

    assert form.is_valid(), form.errors
    assert form.cleaned_data["to"] == "bo@example.com"

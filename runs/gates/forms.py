"""The form of a gate, as data. A stage asks with a Django form class; the event records the
form described field by field (`describe`), so the page that answers it (in another process,
perhaps days later) rebuilds the same form (`build`) and validates the answer with Django's
own fields. Only the field types below are described: what a reviewer fills in.

Through the API an answer is typed JSON: a field of a question holds one value (text for a
text field), never a list or an object read as its Python text; a confirmation's argument is
the JSON value itself (runs/gates/arguments.py reads and checks it)."""

from __future__ import annotations

import logging
from contextlib import suppress
from decimal import Decimal
from functools import cache
from typing import Any

from django import forms
from django.utils.module_loading import import_string

from runs.gates import arguments
from runs.ledger.canonical import canonical_json

logger = logging.getLogger(__name__)

# Django field class <-> the type word the description records.
FIELD_TYPES: dict[str, type[forms.Field]] = {
    "text": forms.CharField,
    "choice": forms.ChoiceField,
    "boolean": forms.BooleanField,
    "integer": forms.IntegerField,
    "decimal": forms.DecimalField,
}
APPROVE, REJECT, REQUEST_CHANGES = "approve", "reject", "request_changes"


class DecisionForm(forms.Form):
    """What ctx.ask() asks when the stage gives no form: approve or reject, with notes."""

    decision = forms.ChoiceField(choices=[(APPROVE, "Approve"), (REJECT, "Reject")])
    notes = forms.CharField(required=False, widget=forms.Textarea, max_length=2000)


class AnswerForm(forms.Form):
    """What an agent loop's question (runs.review.Ask) asks: the answer, as text."""

    answer = forms.CharField(widget=forms.Textarea, max_length=4000)


# What a number field's limits are recorded as, per type: rebuilt, the form refuses what the
# stage's own form refused (a minimum, a maximum, a number of digits).
NUMBER_LIMITS = {
    "integer": ("min_value", "max_value"),
    "decimal": ("min_value", "max_value", "max_digits", "decimal_places"),
}
BOUNDS = ("min_value", "max_value")


def _type_of(field: forms.Field) -> str:
    # Most specific first: a TypedChoiceField is a ChoiceField, a BooleanField is not text,
    # a DecimalField is an IntegerField (Django subclasses it).
    for name in ("choice", "boolean", "decimal", "integer", "text"):
        if isinstance(field, FIELD_TYPES[name]):
            return name
    raise TypeError(
        f"a gate's form field must be one of {', '.join(FIELD_TYPES)} "
        f"(Django's CharField, ChoiceField, ...), not {type(field).__name__}"
    )


def describe(form_class: type[forms.Form]) -> list[dict[str, Any]]:
    """The form class as the event records it: one dict per field, in the form's order."""
    fields = []
    for name, field in form_class.base_fields.items():
        kind = _type_of(field)
        spec: dict[str, Any] = {
            "name": name,
            "type": kind,
            "label": str(field.label or name.replace("_", " ").capitalize()),
            "required": bool(field.required),
            "help": str(field.help_text or ""),
        }
        if kind == "choice":
            spec["choices"] = [[str(v), str(label)] for v, label in field.choices]
        if kind == "text":
            spec["multiline"] = isinstance(field.widget, forms.Textarea)
            spec["max_length"] = field.max_length
        for limit in NUMBER_LIMITS.get(kind, ()):
            value = getattr(field, limit, None)
            if value is not None:
                # A decimal's bounds as text, exact (0.1 is not a float's 0.1000000000000000055).
                spec[limit] = str(value) if kind == "decimal" and limit in BOUNDS else value
        if field.initial is not None:
            spec["initial"] = jsonable(field.initial)
        fields.append(spec)
    return fields


class OneValue:
    """A field of a question's form holds one value: a list or an object (typed JSON through
    the API) is an error of that field, not its Python text."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, list | dict):
            raise forms.ValidationError("Give one value here, not a list or an object.")
        return super().to_python(value)


class RawCheckbox(forms.CheckboxInput):
    """A checkbox that hands its field what was sent. Django's hands it bool(value), so "no"
    or "off" through the API or the command line is True before the field sees it."""

    def value_from_datadict(self, data: Any, files: Any, name: str) -> Any:
        return data.get(name)


YES, NO = frozenset({"true", "yes", "on", "1"}), frozenset({"false", "no", "off", "0", ""})


class BooleanAnswer(forms.BooleanField):
    """A yes-or-no answer as each face sends it: JSON true or false (the API), "on" or
    nothing (a browser's checkbox), true/false, yes/no, on/off, 1/0 (the command line's
    --set). Anything else ("maybe", a list) is an error of the field, never a yes."""

    widget = RawCheckbox

    def to_python(self, value: Any) -> bool:
        if value is None or isinstance(value, bool):
            return bool(value)
        said = value.strip().lower() if isinstance(value, str) else None
        if said in YES or said in NO:
            return said in YES
        raise forms.ValidationError(f"Answer yes or no (true or false); {value!r} is neither.")


def as_shown(form: forms.Form, shown: dict[str, Any]) -> dict[str, Any]:
    """The values a gate showed, read as its form reads an answer (a decimal shown as 40.0
    is the "40.0" an untouched answer gives back), so that an answer that changes nothing
    has no diff. A value its field cannot read is kept as it was."""
    read = dict(shown)
    for name, value in shown.items():
        field = form.fields.get(name)
        if field is None or isinstance(field, forms.CharField | forms.ChoiceField):
            continue
        with suppress(forms.ValidationError):
            read[name] = jsonable(field.to_python(value))
    return read


def errors_said(form: forms.Form) -> str:
    """A form's errors as one line of plain text ("amount: Enter a number."). Django's
    as_text() renders them through a template, HTML-escaped: the API's detail and the page's
    message would say &#x27;off&#x27; (and the page escape it again)."""
    return "; ".join(
        f"{name or 'the answer'}: {' '.join(error['message'] for error in errors)}"
        for name, errors in form.errors.get_json_data().items()
    )


class TextField(forms.CharField):
    """Text as the stage showed it: a browser sends a textarea's lines ending in CRLF (HTML's
    form encoding), so an untouched multi-line value would read as changed (and be used with
    CRs in it) unless its line endings are made LF again. Only text is text: anything else
    through the API (an object, a list, a number) is refused, not turned into its str()."""

    def to_python(self, value: Any) -> Any:
        if value is not None and not isinstance(value, str):
            raise forms.ValidationError("Give text here, not a JSON object, list or number.")
        value = super().to_python(value)
        return value.replace("\r\n", "\n").replace("\r", "\n") if isinstance(value, str) else value


class ArgumentField(forms.Field):
    """An editable argument of a pending call, as the page's input holds it (text; a list or
    an object as JSON) or as the API gives it (the JSON value itself): passed on as entered,
    for runs/gates/arguments.py to read as its kind and check."""

    def __init__(self, *, kind: str, choices: list[Any] | None = None, **kwargs: Any) -> None:
        if choices or kind == "boolean":
            options = [arguments.as_text(c) for c in choices or [True, False]]
            kwargs["widget"] = forms.Select(choices=[(o, o) for o in options])
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        return None if value is None else arguments.as_text(value)

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str):
            return value.replace("\r\n", "\n").replace("\r", "\n")
        return value


def _field(spec: dict[str, Any]) -> forms.Field:
    common = {"label": spec["label"], "required": spec["required"], "help_text": spec["help"]}
    kind = spec["type"]
    if kind == "choice":
        return _one(forms.ChoiceField)(choices=[tuple(c) for c in spec["choices"]], **common)
    if kind == "text":
        widget = forms.Textarea(attrs={"rows": 8}) if spec.get("multiline") else None
        return TextField(max_length=spec.get("max_length"), widget=widget, **common)
    if kind == "argument":
        widget = forms.Textarea(attrs={"rows": 6}) if spec.get("multiline") else None
        return ArgumentField(
            kind=spec["kind"], choices=spec.get("choices"), widget=widget, **common
        )
    if kind == "boolean":
        return BooleanAnswer(**common)
    # A description recorded before limits were (or with none) rebuilds without them.
    limits = {k: _limit(k, spec[k]) for k in NUMBER_LIMITS.get(kind, ()) if k in spec}
    return _one(FIELD_TYPES[kind])(**common, **limits)


def _limit(name: str, value: Any) -> Any:
    return Decimal(value) if name in BOUNDS and isinstance(value, str) else value


@cache
def _one(field_class: type[forms.Field]) -> type[forms.Field]:
    return type(field_class.__name__, (OneValue, field_class), {})


def build(
    spec: list[dict[str, Any]],
    initial: dict[str, Any],
    data: Any = None,
    prefix: str = "",
    form_class: str = "",
) -> forms.Form:
    """The form the description describes, bound to `data` when given; `initial` are the
    values the stage showed (they win over the fields' own). `form_class`, where the stage's
    form class was (class_path()): its own clean() and clean_<field>() check the answer too
    (a choice that needs a note), as long as it still describes the same form."""
    fields = {s["name"]: _field(s) for s in spec}
    shown = {s["name"]: s["initial"] for s in spec if "initial" in s} | dict(initial)
    base = _stage_form(spec, form_class)
    _keep_validators(fields, base)
    made = type("GateForm", (base,), fields)
    try:
        return made(data=data, initial=shown, prefix=prefix or None)
    except TypeError:
        # Its __init__ takes arguments of its own that only the stage could give: the
        # fields' checks stand alone, as for a class that is gone.
        plain = type("GateForm", (forms.Form,), fields)
        return plain(data=data, initial=shown, prefix=prefix or None)


def _keep_validators(fields: dict[str, forms.Field], base: type[forms.Form]) -> None:
    """Give each rebuilt field the checks its stage's field had beyond what the description
    records (an EmailField's address check, a min_length): the description says a field's
    kind and bounds, not every validator, and the answer must pass what the stage's form
    would have passed."""
    for name, field in fields.items():
        stage_field = base.base_fields.get(name)
        if stage_field is None:
            continue
        held = {_validator_key(v) for v in field.validators}
        field.validators = [
            *field.validators,
            *(v for v in stage_field.validators if _validator_key(v) not in held),
        ]


def _validator_key(validator: Any) -> tuple:
    # Two max-length checks of one bound are one check: said twice, the error would be too.
    return (type(validator), getattr(validator, "limit_value", None))


def class_path(form_class: type[forms.Form]) -> str:
    """Where a stage's form class is found again by the process that answers its gate."""
    return f"{form_class.__module__}.{form_class.__qualname__}"


def _stage_form(spec: list[dict[str, Any]], path: str) -> type[forms.Form]:
    """The stage's form class to rebuild the form on (its fields replaced by the recorded
    ones, its clean methods kept), or Django's Form: where the class cannot be imported
    here, or has changed since the gate was asked (a form that no longer describes what the
    reviewer was shown must not rule on the answer)."""
    if not path:
        return forms.Form
    try:
        found = import_string(path)
    except ImportError:
        found = None
    if not (isinstance(found, type) and issubclass(found, forms.Form)):
        logger.warning("gate form %s is not importable here: its clean() does not apply", path)
        return forms.Form
    try:
        same = canonical_json(describe(found)) == canonical_json(spec)
    except TypeError:  # it has a field no gate can describe now
        same = False
    if not same:
        # Said, not silent: a rule the stage's form had (notes to send work back) no longer
        # checks this gate's answers; the fields' own checks still do.
        logger.warning(
            "gate form %s changed since the gate was asked: its clean() does not apply", path
        )
        return forms.Form
    return found


def jsonable(value: Any) -> Any:
    """What a form's cleaned value is in JSON (an answer is an event payload)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """{name: [shown, answered]} for every value the answer changed, compared as typed JSON
    (true is not 1, [1] is not "[1]")."""
    return {
        name: [before.get(name), after[name]]
        for name in sorted(after)
        if name in before
        and canonical_json(jsonable(before[name])) != canonical_json(jsonable(after[name]))
    }


def confirmation_spec(call: dict[str, Any]) -> list[dict[str, Any]]:
    """The form of a confirmation: the decision, a reason, and the call's editable arguments,
    each of its kind (runs/gates/arguments.py), with its rules in its help."""
    spec = describe(ConfirmForm)
    for name in call.get("editable", []):
        kind = arguments.kind_of(call, name)
        recorded = call.get("arguments", {}).get(name, {})
        what = ", ".join([kind, *recorded.get("rules", [])])
        as_json = " as JSON" if kind in arguments.JSON_KINDS else ""
        shown = arguments.as_text(call["args"].get(name, ""))
        spec.append(
            {
                "name": f"arg_{name}",
                "type": "argument",
                "kind": kind,
                "label": f"{name}",
                "required": False,
                "help": f"editable ({what}): the call is made with what you enter here{as_json} "
                "(left empty, with the value asked for)",
                "multiline": kind in arguments.JSON_KINDS or len(shown) > 80 or "\n" in shown,
                **({"choices": recorded["choices"]} if recorded.get("choices") else {}),
            }
        )
    return spec


class ConfirmForm(forms.Form):
    decision = forms.ChoiceField(choices=[(APPROVE, "Approve the call"), (REJECT, "Reject it")])
    reason = forms.CharField(
        required=False,
        max_length=2000,
        help_text="required when you reject: the stage is told why",
    )


def confirmation_initial(call: dict[str, Any]) -> dict[str, Any]:
    return {"decision": APPROVE} | {
        f"arg_{name}": call["args"].get(name, "") for name in call.get("editable", [])
    }

"""A confirmation's editable arguments: their types, how a reviewer's entry is read, and the
check an edit must pass before anything is recorded.

Every editable argument has a *kind*: from the tool's `args` model (pydantic) when it declares
one, else from the JSON type of the value the stage asked with. A list or an object is edited
as JSON, never as Python text; a value the reviewer leaves as it was is the recorded value
exactly (compared as canonical JSON), so an untouched approval edits nothing.

Where the check runs: the gate's page is served by the web process long after GATE_OPENED, so
the gate records each argument's kind and rules for the page, and the model's JSON schema for
API clients. An edit is checked against the tool's own model, looked up in the pipeline
registry: the same model the pipeline declares, with checks JSON Schema cannot say (decimal
places, finite numbers, the model's own validators and how it writes a value as JSON). A
process that does not know the tool refuses edits (approving as asked still works)."""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any

from runs.ledger.canonical import canonical_json
from runs.pipeline import Tool, UnknownPipeline, registry

if TYPE_CHECKING:
    from pydantic import BaseModel


def _pydantic():
    """pydantic, which a tool's `args` model has loaded already: imported here at first use,
    so a command line that edits no call starts without it (tests/test_cli_start.py)."""
    import pydantic

    return pydantic


# The JSON schema's "type" <-> the kind an argument is edited as.
SCHEMA_KINDS = {
    "string": "string",
    "integer": "integer",
    "number": "number",
    "boolean": "boolean",
    "array": "list",
    "object": "object",
}
# Edited as JSON text in a textarea.
JSON_KINDS = frozenset({"list", "object", "json"})
# Constraint attributes of pydantic's field metadata, as the page says them.
RULES = (
    ("gt", "> {}"),
    ("ge", "≥ {}"),
    ("lt", "< {}"),
    ("le", "≤ {}"),
    ("multiple_of", "a multiple of {}"),
    ("min_length", "at least {} long"),
    ("max_length", "at most {} long"),
    ("decimal_places", "at most {} decimal places"),
    ("max_digits", "at most {} digits"),
    ("pattern", "matching {}"),
)
PYTHON_DECIMAL = re.compile(r"Decimal\('([^']*)'\)")
MESSAGES = {
    "string": "must be text",
    "integer": "must be a whole number, like 3",
    "number": "must be a finite number, like 5 or 2.5",
    "decimal": "must be a decimal number written out, like 5.00 (not 1e2)",
    "boolean": "must be true or false",
    "list": 'must be a JSON list, like ["a", "b"]',
    "object": 'must be a JSON object, like {"key": "value"}',
    "json": "must be JSON",
}


# What is not a number at all ("abc", a list), said without the exponent a typo is not.
NOT_A_DECIMAL = "must be a decimal number, like 5.00"
# A decimal entered as text, written out: Decimal reads "1e2" as 100, so a reviewer's typo
# (or a client's exponent) would otherwise approve a charge a hundred times what it reads.
DECIMAL_TEXT = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?")


class EditRefused(ValueError):
    """The edit does not fit the call: {argument name, or "" for the call: [messages]}."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{n or 'call'}: {' '.join(m)}" for n, m in errors.items()))
        self.errors = errors


def edit_model(tool: Tool) -> type[BaseModel] | None:
    """The model an edit is checked against: the tool's `args`, with its confirmation's
    `limits` added to the types of the arguments they name."""
    confirm = tool.confirmation
    if tool.args is None or confirm is None or not confirm.limits:
        return tool.args
    fields: dict[str, Any] = {}
    for name, limit in confirm.limits.items():
        info = tool.args.model_fields[name]
        fields[name] = (info.annotation, type(info).merge_field_infos(info, limit))
    return _pydantic().create_model(f"{tool.args.__name__}Edit", __base__=tool.args, **fields)


def value_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return {list: "list", dict: "object"}.get(type(value), "json")


def _resolved(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    return defs.get(prop["$ref"].rsplit("/", 1)[-1], {}) if "$ref" in prop else prop


def _schema_kind(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    prop = _resolved(prop, defs)
    if "enum" in prop:
        return value_kind(prop["enum"][0]) if prop["enum"] else "json"
    if "type" in prop:
        return SCHEMA_KINDS.get(prop["type"], "json")
    options = [o for o in prop.get("anyOf", []) if o.get("type") != "null"]
    if {o.get("type") for o in options} == {"number", "string"}:
        return "decimal"  # pydantic's Decimal: a number, or its text
    return _schema_kind(options[0], defs) if len(options) == 1 else "json"


def describe(tool: Tool, args: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What GATE_OPENED records of the editable arguments: per argument its kind, its rules
    for people and its choices; and the model's JSON schema ({} without a model)."""
    model = edit_model(tool)
    schema = model.model_json_schema() if model is not None else {}
    props, defs = schema.get("properties", {}), schema.get("$defs", {})
    for prop in props.values():
        _json_schema_bounds(prop)
    described = {}
    for name in [n for n in tool.confirmation.editable if n in args]:
        prop = props.get(name)
        entry: dict[str, Any] = {
            "kind": _schema_kind(prop, defs) if prop else value_kind(args[name]),
            "rules": _rules(model, name),
        }
        if prop and _resolved(prop, defs).get("enum"):
            entry["choices"] = _resolved(prop, defs)["enum"]
        described[name] = entry
    return described, schema


# pydantic writes a confirmation's limit on a Decimal (a number, or its text: anyOf) as its
# own keyword beside the anyOf ("le": "100.00"), which no JSON Schema client reads: said as
# JSON Schema's bound, on the number it bounds.
JSON_SCHEMA_BOUNDS = {
    "gt": "exclusiveMinimum",
    "ge": "minimum",
    "lt": "exclusiveMaximum",
    "le": "maximum",
}


def _json_schema_bounds(prop: dict[str, Any]) -> None:
    numbers = [o for o in prop.get("anyOf", []) if o.get("type") in ("number", "integer")]
    for ours, theirs in JSON_SCHEMA_BOUNDS.items():
        if ours in prop and numbers:
            bound = float(prop.pop(ours))
            for number in numbers:
                number[theirs] = bound


def _rules(model: type[BaseModel] | None, name: str) -> list[str]:
    if model is None or name not in model.model_fields:
        return []
    said = []
    for meta in model.model_fields[name].metadata:
        for attr, text in RULES:
            value = getattr(meta, attr, None)
            if value is not None:
                said.append(text.format(value))
    return said


def kind_of(call: dict[str, Any], name: str) -> str:
    """An editable argument's kind: as GATE_OPENED recorded it, else its value's JSON type
    (a gate opened before kinds were recorded)."""
    recorded = call.get("arguments", {}).get(name, {})
    return recorded.get("kind") or value_kind(call["args"].get(name))


def as_text(value: Any) -> str:
    """A JSON value as the page's input holds it: text as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def read(kind: str, entered: Any) -> Any:
    """The JSON value an entry stands for: the page sends text (a list or an object as JSON),
    the API the JSON value itself (or its text). Raises ValueError, said for the reviewer."""
    if kind == "string":
        if not isinstance(entered, str):
            raise ValueError(MESSAGES[kind])
        return entered
    value = entered
    if isinstance(entered, str) and kind != "decimal":
        try:
            value = json.loads(entered, parse_constant=_no_constant)
        except ValueError:
            raise ValueError(MESSAGES[kind]) from None
    fits = {
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "decimal": isinstance(value, int | float | str) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "list": isinstance(value, list),
        "object": isinstance(value, dict),
    }.get(kind, True)
    if not fits and kind == "decimal":
        raise ValueError(NOT_A_DECIMAL)
    if not fits or not _finite(value):
        raise ValueError(MESSAGES.get(kind, MESSAGES["json"]))
    if kind == "decimal" and isinstance(value, str) and not DECIMAL_TEXT.fullmatch(value.strip()):
        raise ValueError(_not_written_out(value))
    return value


def _not_written_out(text: str) -> str:
    """Why a decimal's text is refused, where a reviewer may not see it."""
    if "," in text:
        return f"{NOT_A_DECIMAL}, with a point, not a comma"
    if any(c.isdigit() and not c.isascii() for c in text):
        return f"{NOT_A_DECIMAL}, in the digits 0-9"
    if any(c.isdigit() for c in text):
        return MESSAGES["decimal"]  # a number written otherwise: 1e2, 0x10, 1_000
    return NOT_A_DECIMAL


def _same(a: Any, b: Any) -> bool:
    return canonical_json(a) == canonical_json(b)


def tool_of(pipeline: str, name: str) -> Tool | None:
    try:
        return registry.get(pipeline).tool(name)
    except (UnknownPipeline, KeyError):
        return None


def edited(call: dict[str, Any], entered: dict[str, Any], tool: Tool | None) -> dict[str, Any]:
    """The call's arguments with the reviewer's edits, each of its kind and checked against
    the tool's model; an entry left empty, or the same as asked, keeps the recorded value.
    Raises EditRefused, with every argument's errors."""
    args, edits, errors = dict(call["args"]), {}, {}
    for name, raw in entered.items():
        if raw in (None, ""):
            continue
        try:
            value = read(kind_of(call, name), raw)
        except ValueError as exc:
            errors[name] = [str(exc)]
            continue
        if not _same(value, args.get(name)):
            edits[name] = value
    if errors or not edits:
        if errors:
            raise EditRefused(errors)
        return args
    if tool is None:
        unknown = f"this process does not know the tool {call['tool']}: its arguments cannot be"
        raise EditRefused(
            {"": [f"{unknown} checked here; approve the call as asked, or reject it"]}
        )
    return _checked(args, edits, edit_model(tool))


def _checked(
    args: dict[str, Any], edits: dict[str, Any], model: type[BaseModel] | None
) -> dict[str, Any]:
    if model is None:
        return args | edits
    try:
        written = model.model_validate(args | edits).model_dump(mode="json")
    except _pydantic().ValidationError as exc:
        errors: dict[str, list[str]] = {}
        for error in exc.errors():
            name = str(error["loc"][0]) if error["loc"] else ""
            # "less than or equal to Decimal('100.00')" is said "... to 100.00".
            said = PYTHON_DECIMAL.sub(r"\1", error["msg"])
            errors.setdefault(name if name in edits else "", []).append(
                said if name in edits else f"{name}: {said}"
            )
        raise EditRefused(errors) from None
    # The model writes an edited value as JSON its own way ("20" as "20.00"); one that comes
    # out as it was asked is no edit.
    return args | {n: written[n] for n in edits if not _same(written[n], args.get(n))}

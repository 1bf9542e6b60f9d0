"""The scripted model: /v1/chat/completions answering as a script says, so an agent can be
run, and tested, without a model provider.

    POST /v1/scripts {"name": "reply", "steps": [step, ...]}
    POST /v1/scripts {"name": "triage-then-reply", "conversations": [[step, ...], [step, ...]]}
    a chat completion with "model": "script:reply" follows it

Per conversation: a conversation is known by its opening (the messages before the model's
first answer). With "steps", every conversation follows them. With "conversations", the
first opening the service sees takes the first, the next new opening the second, and so on;
an opening seen before keeps its own (stored: ScriptConversation). Within a conversation the
step is the number of the model's answers the request holds, so the same request gets the
same answer, as from a model at temperature 0: a retried turn, a replayed one.

A step is one of:

    {"content": "text"} ........................ an answer in text
    {"json": {...}} ............................ an answer in JSON: the object, with what the
                                                 request's response_format schema requires
                                                 and the step leaves out filled in
    {"json": "schema"} ......................... JSON made from that schema alone
    {"invalid": true} .......................... JSON that does not validate against it (a
                                                 required property left out): what an output
                                                 retry is tested with
    {"tool_calls": [{"name": ..., "arguments": {...}}, ...]}
                                                 tool calls, several in one turn if listed;
                                                 each one's arguments completed from the
                                                 offered tool's parameters like JSON above

Usage is counted as for the demo's own model (chat.py), and the service's faults (op "chat")
apply as to every completion. A script that has no step, or no conversation, for a request
is a 400 that says so.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db import transaction

from demo_service.idempotency import Invalid
from demo_service.models import Script, ScriptConversation

PREFIX = "script:"
MAX_STEPS = 200
MAX_CONVERSATIONS = 50
SCHEMA = "schema"
KINDS = ("content", "json", "invalid", "tool_calls")


def register(body: dict[str, Any]) -> Script:
    """Store a script under its name (replacing one of that name, and forgetting which
    conversation was whose)."""
    name = body.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 100 or not name.isprintable():
        raise Invalid("name must be 1 to 100 printable characters")
    if ("steps" in body) == ("conversations" in body):
        raise Invalid('a script has "steps" or "conversations" (a list of step lists)')
    unknown = set(body) - {"name", "steps", "conversations"}
    if unknown:
        raise Invalid(f"unknown field(s): {', '.join(sorted(unknown))}")
    given = [body["steps"]] if "steps" in body else body["conversations"]
    if not isinstance(given, list) or not 1 <= len(given) <= MAX_CONVERSATIONS:
        raise Invalid(f"conversations must be a list of 1 to {MAX_CONVERSATIONS} step lists")
    for steps in given:
        _check_steps(steps)
    with transaction.atomic():
        Script.objects.filter(name=name).delete()
        return Script.objects.create(name=name, conversations=given, shared="steps" in body)


def _check_steps(steps: Any) -> None:
    if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_STEPS:
        raise Invalid(f"steps must be a list of 1 to {MAX_STEPS} steps")
    for number, step in enumerate(steps, 1):
        kinds = [k for k in KINDS if k in step] if isinstance(step, dict) else []
        if len(kinds) != 1 or len(step) != 1:
            raise Invalid(f"step {number} must be an object with one of {', '.join(KINDS)}")
        value = step[kinds[0]]
        if kinds[0] == "content" and not isinstance(value, str):
            raise Invalid(f"step {number}: content must be text")
        if kinds[0] == "json" and not (isinstance(value, dict) or value == SCHEMA):
            raise Invalid(f'step {number}: json must be an object or "{SCHEMA}"')
        if kinds[0] == "invalid" and value is not True:
            raise Invalid(f"step {number}: invalid must be true")
        if kinds[0] == "tool_calls":
            _check_calls(number, value)


def _check_calls(number: int, calls: Any) -> None:
    if not isinstance(calls, list) or not calls:
        raise Invalid(f"step {number}: tool_calls must be a non-empty list")
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise Invalid(f"step {number}: each tool call needs a name")
        if set(call) - {"name", "arguments"} or not isinstance(call.get("arguments", {}), dict):
            raise Invalid(f"step {number}: a tool call is a name and an arguments object")


def answer(model: str, body: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant's message for this request, as its script says."""
    name = model.removeprefix(PREFIX)
    script = Script.objects.filter(name=name).first()
    if script is None:
        raise Invalid(f"no script named {name!r}: register it with POST /v1/scripts")
    conversation = _conversation(script, messages)
    steps = script.conversations[conversation]
    step = sum(1 for m in messages if m.get("role") == "assistant")
    if step >= len(steps):
        raise Invalid(
            f"script {name!r}, conversation {conversation + 1}, has {len(steps)} steps; "
            f"this request asks for step {step + 1}"
        )
    return _message(steps[step], body, f"{name}/{conversation}/{step}")


def _conversation(script: Script, messages: list[dict[str, Any]]) -> int:
    if script.shared:
        return 0
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)
    opening = json.dumps(messages[:first], sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(opening.encode()).hexdigest()
    known = ScriptConversation.objects.filter(script=script, opening=digest).first()
    if known is not None:
        return known.number
    number = ScriptConversation.objects.filter(script=script).count()
    if number >= len(script.conversations):
        raise Invalid(
            f"script {script.name!r} has {len(script.conversations)} conversations; this "
            f"request opens conversation {number + 1}"
        )
    ScriptConversation.objects.create(script=script, opening=digest, number=number)
    return number


def _message(step: dict[str, Any], body: dict[str, Any], seed: str) -> dict[str, Any]:
    if "content" in step:
        return {"role": "assistant", "content": step["content"]}
    if "tool_calls" in step:
        offered = {
            (t.get("function") or {}).get("name"): (t.get("function") or {}).get("parameters")
            for t in body.get("tools") or []
            if isinstance(t, dict)
        }
        calls = [
            {
                "id": f"call_{hashlib.sha256(f'{seed}/{i}'.encode()).hexdigest()[:12]}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": json.dumps(
                        completed(call.get("arguments", {}), offered.get(call["name"]) or {})
                    ),
                },
            }
            for i, call in enumerate(step["tool_calls"])
        ]
        return {"role": "assistant", "content": None, "tool_calls": calls}
    schema = _response_schema(body)
    if "invalid" in step:
        return {"role": "assistant", "content": json.dumps(invalid(schema))}
    given = {} if step["json"] == SCHEMA else step["json"]
    return {"role": "assistant", "content": json.dumps(completed(given, schema))}


def _response_schema(body: dict[str, Any]) -> dict[str, Any]:
    form = body.get("response_format")
    if isinstance(form, dict) and form.get("type") == "json_schema":
        return (form.get("json_schema") or {}).get("schema") or {}
    return {}


# --- values that honour a JSON schema ------------------------------------------------------


def completed(given: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """`given`, with every required property it leaves out made from the schema."""
    made = value(schema, schema.get("$defs", {})) if schema else {}
    return {**made, **given} if isinstance(made, dict) else dict(given)


def invalid(schema: dict[str, Any]) -> Any:
    """A value the schema refuses: its first required property left out."""
    made = value(schema, schema.get("$defs", {})) if schema else {}
    required = schema.get("required") or []
    if isinstance(made, dict) and required:
        made.pop(required[0], None)
        return made
    return [made]  # no required property: a list where the schema wants an object


def value(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    """The plainest value of a schema: its const, default or first choice; an object of its
    required properties; the fewest items a list may have; text, 0 or false."""
    if "$ref" in schema:
        return value(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs)
    for word in ("const", "default"):
        if word in schema:
            return schema[word]
    if schema.get("enum"):
        return schema["enum"][0]
    options = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
    if options:
        chosen = [o for o in options if o.get("type") != "null"] or options
        return value(chosen[0], defs)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {n: value(properties.get(n, {}), defs) for n in schema.get("required") or []}
    if kind == "array":
        return [value(schema.get("items") or {}, defs)] * int(schema.get("minItems", 0))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        return low if kind == "number" else int(low)
    if kind == "boolean":
        return False
    if kind == "string":
        return _text(schema)
    return None


FORMATS = {
    "date": "2030-01-07",
    "date-time": "2030-01-07T09:00:00Z",
    "time": "09:00:00",
    "email": "someone@example.com",
    "uri": "https://example.com/",
}


def _text(schema: dict[str, Any]) -> str:
    text = FORMATS.get(schema.get("format", ""), "example")
    text = text.ljust(int(schema.get("minLength", 0)), "x")
    return text[: schema["maxLength"]] if "maxLength" in schema else text

"""The demo's language model: an OpenAI-compatible POST /v1/chat/completions whose answer is
a deterministic function of the request, with real `usage` numbers, so a test can tell a
reused completion from a billed one and a plan's token figures from what a resume spent.

What it answers (a model named "script:<name>" answers as that script says instead:
demo_service/scripts.py):

    tools offered, no tool result yet ... a tool call: the first tool, its arguments taken
                                          from the JSON object of facts in the system message
                                          (a parameter named like a fact gets its value)
    a prompt with numbered facts ........ an article: "Title:" line as its title, each fact
                                          cited [n], its sources listed, signed by the model
    a tool result ....................... a summary of what the tool returned
    anything else ....................... a short deterministic reply

Tokens are words and punctuation marks (a real tokenizer's order of magnitude); the cached
tokens are the prompt's prefix before the last two messages, which a real API would have
seen on the previous turn. Like every model API it does not deduplicate: the same request
twice is two completions, two bills. Its faults are the service's (op "chat"), keyed by the
Idempotency-Key header the model tool sends.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from decimal import Decimal
from typing import Any

from demo_service import scripts
from demo_service.idempotency import Invalid

# Dollars per million tokens, for every demo model.
CHAT_PRICES = {"prompt": Decimal("2.50"), "completion": Decimal("10.00"), "cached": Decimal("1.25")}
TOKEN_RE = re.compile(r"\w+|[^\w\s]")
FACT_RE = re.compile(r"^(\d+)\. (.+) — (\S+)$")
MAX_MESSAGES = 200


def tokens(text: str) -> int:
    return len(TOKEN_RE.findall(text))


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    calls = message.get("tool_calls") or []
    return " ".join([str(content), *(json.dumps(c, sort_keys=True) for c in calls)]).strip()


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or len(messages) > MAX_MESSAGES:
        raise Invalid(f"messages must be a list of 1 to {MAX_MESSAGES} messages")
    if not all(isinstance(m, dict) and m.get("role") for m in messages):
        raise Invalid("every message must be an object with a role")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Invalid("model is required")
    return messages


def _facts(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The first JSON object in the system message (the facts a stage puts first)."""
    for message in messages:
        if message.get("role") != "system":
            continue
        text = _text(message)
        start = text.find("{")
        if start < 0:
            continue
        try:
            value, _ = json.JSONDecoder().raw_decode(text[start:])
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def _tool_call(tool: dict[str, Any], facts: dict[str, Any], seed: str) -> dict[str, Any]:
    function = tool.get("function") or {}
    properties = (function.get("parameters") or {}).get("properties") or {}
    arguments = {name: facts[name] for name in properties if name in facts}
    return {
        "id": f"call_{hashlib.sha256(seed.encode()).hexdigest()[:12]}",
        "type": "function",
        "function": {"name": function.get("name", ""), "arguments": json.dumps(arguments)},
    }


def _article(prompt: str, model: str) -> str | None:
    facts = [m.groups() for line in prompt.splitlines() if (m := FACT_RE.match(line.strip()))]
    if not facts:
        return None
    title = next(
        (line[6:].strip() for line in prompt.splitlines() if line.startswith("Title:")),
        "Untitled",
    )
    lines = [f"# {title}", "", "A run that dies halfway should not start over from step one."]
    lines += [f"{n}. {claim} [{n}]" for n, claim, _ in facts]
    lines += ["", "Retry is not a recovery strategy; a verified plan is. " * 3, ""]
    lines += [f"[{n}] {source}" for n, _, source in facts]
    lines += ["", f"Drafted by {model}."]
    return "\n".join(lines)


def _summary(messages: list[dict[str, Any]]) -> str:
    results = [m for m in messages if m.get("role") == "tool"]
    try:
        found = json.loads(results[-1].get("content") or "{}")
    except ValueError:
        found = {}
    facts = found.get("facts") if isinstance(found, dict) else None
    if isinstance(facts, list):
        claims = "; ".join(str(f.get("claim", "")) for f in facts if isinstance(f, dict))
        return f"Found {len(facts)} sourced facts: {claims}."
    return f"Read {len(results)} tool result(s)."


def complete(body: dict[str, Any], key: str) -> tuple[dict[str, Any], Decimal]:
    """One completion (idempotency.Perform): the answer as JSON and what it was billed."""
    messages = _messages(body)
    model = body["model"]
    tools = body.get("tools") or []
    prompt = "\n".join(_text(m) for m in messages)
    message: dict[str, Any] = {"role": "assistant"}
    if model.startswith(scripts.PREFIX):
        # A model a test or a developer scripted (demo_service/scripts.py).
        message = scripts.answer(model, body, messages)
        said = _text(message)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
    elif tools and not any(m.get("role") == "tool" for m in messages):
        call = _tool_call(tools[0], _facts(messages), prompt)
        message |= {"content": None, "tool_calls": [call]}
        finish, said = "tool_calls", json.dumps(call)
    else:
        last = _text(messages[-1])
        if messages[-1].get("role") == "tool":
            said = _summary(messages)
        else:
            said = _article(prompt, model) or f"({model}) noted: {' '.join(last.split()[:40])}"
        message["content"] = said
        finish = "stop"
    prompt_tokens = tokens(prompt)
    cached = tokens("\n".join(_text(m) for m in messages[:-2])) if len(messages) > 2 else 0
    usage = {"prompt": prompt_tokens, "completion": tokens(said), "cached": cached}
    cost = (
        CHAT_PRICES["prompt"] * (prompt_tokens - cached)
        + CHAT_PRICES["cached"] * cached
        + CHAT_PRICES["completion"] * usage["completion"]
    ) / Decimal(1_000_000)
    answer = {
        "id": f"chatcmpl-{secrets.token_hex(8)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": usage["completion"],
            "total_tokens": prompt_tokens + usage["completion"],
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }
    return answer, cost

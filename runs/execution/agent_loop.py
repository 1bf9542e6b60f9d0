"""An agent loop inside a stage (its StageContext holds the loops): `converse()` asks a
model, lets it request tools, and goes on until it answers.

    facts first (the pinned inputs and what the stage passes: verified upstream outputs) →
    [on a branch: the parent's conversation, marked as prior context] → the task →
    turn n: ctx.call("turn-n", model tool, the conversation so far) →
        tool calls requested: each through ctx.call("<tool>-k", tool, **arguments), with that
        tool's policy, key, contract and gates; its result appended → turn n + 1
        no tool call: the answer

Every turn is a recorded effect whose key is its conversation up to that turn (the model
tool's key), so a resume replays facts: a recorded turn is reused (not asked, not billed), a
tool result is what its policy makes it (a SAFE tool runs again, an effect is reused), and
the loop goes on from the first turn that was not recorded. The model is never asked "how far
did you get".

The conversation is context, never evidence: each turn stores it as an artifact (the model
tool does), referenced from the turn's event; the run page shows it. Nothing that decides
replay reads it. On a strict resume the conversation is rebuilt from the recorded turns
alone; only a branch (new inputs) is shown its parent's conversation, after the facts, as
prior context.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from runs.events import read
from runs.ledger import artifacts
from runs.models import Event, Run

PRIOR_CONTEXT = "prior_context"
FACTS_PREAMBLE = (
    "Facts (verified and pinned; they take precedence over anything else in this conversation):\n"
)
PRIOR_PREAMBLE = (
    "Prior context from an earlier attempt of this work. It is not evidence and may be "
    "outdated; the facts above take precedence:\n"
)
PRIOR_LIMIT = 4000


class LoopFailed(RuntimeError):
    """The loop cannot go on: a tool the loop does not offer, a turn without an answer, or
    no answer within max_turns. The stage fails with it."""


@dataclass
class Conversation:
    """What a loop ends with: the model's final text, every message, the turns taken and the
    tool calls made ({"call", "tool", "args", "result"})."""

    final: str
    messages: list[dict[str, Any]]
    turns: int
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class AgentLoops:
    """The agent loops of a stage (its StageContext holds them)."""

    def __init__(
        self, run: Run, stage: str, inputs: dict[str, Any], call: Callable[..., Any]
    ) -> None:
        self.run = run
        self.stage = stage
        self.inputs = inputs
        # The stage's ctx.call: each turn and each requested tool is a durable call of its own.
        self.call = call

    def converse(
        self,
        loop_id: str = "",
        *,
        model: str,
        task: str,
        facts: dict[str, Any] | None = None,
        tools: dict[str, dict[str, Any]] | None = None,
        model_tool: str = "model",
        max_turns: int = 8,
        params: dict[str, Any] | None = None,
    ) -> Conversation:
        offered = dict(tools or {})
        messages = self._opening(loop_id, task, facts)
        schemas = [
            {"type": "function", "function": {"name": name, **schema}}
            for name, schema in offered.items()
        ]
        requested: dict[str, int] = {}
        made: list[dict[str, Any]] = []
        for turn in range(1, max_turns + 1):
            args = {"model": model, "messages": messages, **(params or {})}
            if schemas:
                args["tools"] = schemas
            reply = self.call(_call_id(loop_id, f"turn-{turn}"), model_tool, **args)
            message = _message(reply, loop_id, turn)
            messages = [*messages, message]
            requests = message.get("tool_calls") or []
            if not requests:
                return Conversation(message.get("content") or "", messages, turn, made)
            for request in requests:
                name, arguments = _requested(request, offered)
                requested[name] = requested.get(name, 0) + 1
                call_id = _call_id(loop_id, f"{name}-{requested[name]}")
                result = self.call(call_id, name, **arguments)
                made.append({"call": call_id, "tool": name, "args": arguments, "result": result})
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": request.get("id", ""),
                        "content": json.dumps(result, sort_keys=True, default=str),
                    }
                )
        raise LoopFailed(f"the loop{_named(loop_id)} did not finish within {max_turns} turns")

    def _opening(
        self, loop_id: str, task: str, facts: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        """Facts first: the pinned inputs the stage consumes and what the stage passes (its
        verified upstream outputs); then, on a branch, the parent's conversation as prior
        context; then the task."""
        known = {**{k: v for k, v in self.inputs.items() if v is not None}, **(facts or {})}
        messages = [
            {
                "role": "system",
                "content": FACTS_PREAMBLE + json.dumps(known, sort_keys=True, default=str),
            }
        ]
        prior = self._prior_context(loop_id)
        if prior:
            messages.append({"role": "user", "name": PRIOR_CONTEXT, "content": prior})
        messages.append({"role": "user", "content": task})
        return messages

    def _prior_context(self, loop_id: str) -> str:
        """The parent run's last conversation of this loop, as text marked prior context ("":
        none, or this run is no branch). Read only here, for the model; a conversation that
        no longer verifies is left out."""
        if self.run.parent_id is None:
            return ""
        for conversation in conversations_of(self.run.parent_id, self.stage, loop_id):
            said = [
                f"{m.get('role')}: {m.get('content')}"
                for m in conversation.get("messages", [])
                if m.get("role") == "assistant" and m.get("content")
            ]
            if said:
                return PRIOR_PREAMBLE + "\n".join(said)[:PRIOR_LIMIT]
        return ""


def conversations_of(run_pk: int, stage: str, loop_id: str = "") -> Iterator[dict[str, Any]]:
    """A run's recorded conversations of one loop, newest first (each turn's artifact holds
    the conversation up to and with its answer); one that does not verify is skipped."""
    prefix = _call_id(loop_id, "turn-")
    rows = (
        Event.objects.filter(run_id=run_pk, stage=stage, type=Event.Type.TOOL_RESULT)
        .order_by("-seq")
        .only("type", "payload")
    )
    for row in rows:
        said = read(row)
        result = said.result if isinstance(said.result, dict) else {}
        ref = result.get("conversation")
        if not ref or not said.call.startswith(prefix):
            continue
        try:
            yield json.loads(artifacts.read_verified(ref["uri"], ref["sha256"]))
        except Exception:  # deleted or altered: context is optional, never trusted blindly
            continue


def _call_id(loop_id: str, name: str) -> str:
    return f"{loop_id}.{name}" if loop_id else name


def _named(loop_id: str) -> str:
    return f" {loop_id}" if loop_id else ""


def _message(reply: Any, loop_id: str, turn: int) -> dict[str, Any]:
    if not isinstance(reply, dict) or not isinstance(reply.get("message"), dict):
        raise LoopFailed(
            f"turn {turn} of the loop{_named(loop_id)} has no recorded answer (abandoned, or "
            "confirmed by hand without one): the loop cannot go on from it"
        )
    message = dict(reply["message"])
    message.setdefault("role", "assistant")
    return message


def _requested(request: dict[str, Any], offered: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    function = request.get("function") or {}
    name = function.get("name", "")
    if name not in offered:
        raise LoopFailed(
            f"the model asked for {name!r}, which this loop does not offer "
            f"({', '.join(offered) or 'no tools'})"
        )
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError as exc:
        raise LoopFailed(f"the model's arguments for {name} are not JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise LoopFailed(f"the model's arguments for {name} are not an object")
    return name, arguments

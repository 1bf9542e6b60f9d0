"""An agent loop inside a stage (its StageContext holds the loops): `converse()` asks a
model, lets it request tools, and goes on until it answers.

    system instructions and facts first (the pinned inputs and what the stage passes:
    verified upstream outputs) → [on a branch: the parent's conversation, marked as prior
    context] → the task →
    turn n: ctx.call("turn-n", model tool, the conversation so far, the tools offered) →
        tool calls requested, each in the order asked (loop_tools.py says what is offered):
            a pipeline tool: its arguments checked against its model (a wrong one is told to
            the model, nothing called), then ctx.call("<tool>-k", tool, **arguments) with that
            tool's policy, key, contract and gates; a reviewer's edit is told with the result,
            a rejection (Confirm(on_reject="return")) is the result, with their reason
            an Ask: ctx.ask("<name>-k", the question): the run waits for the answer, which is
            the result
            the final-answer tool (tool_choice="required"): its arguments, validated, are the
            output, and the loop ends after the turn's other calls
        → turn n + 1
        no tool call: the answer (validated as `output_type` when one is given)
    an answer that does not validate is asked again as a new turn, with the errors, at most
    `output_retries` times

Every turn is a recorded effect whose key is its conversation up to that turn (the model
tool's key), so a resume replays facts: a recorded turn is reused (not asked, not billed), a
tool result is what its policy makes it, and the loop goes on from the first turn that was
not recorded. The call ids are the loop's own count (`turn-3`, `send_email-2`), and nothing in
a request depends on the clock or on chance, so a stage entered again (after a gate, after a
crash) asks each call as it asked it before. The model is never asked "how far did you get".

The conversation is context, never evidence: each turn stores it as an artifact (the model
tool does), referenced from the turn's event; the run page shows it. Nothing that decides
replay reads it. On a strict resume the conversation is rebuilt from the recorded turns
alone; only a branch (new inputs) is shown its parent's conversation, after the facts, as
prior context.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from runs.events import read
from runs.execution import loop_tools
from runs.execution.asking import MAX_QUESTION
from runs.execution.loop_tools import FinalAnswer, Offer, Offered
from runs.gates.forms import AnswerForm
from runs.ledger import artifacts
from runs.models import Event
from runs.pipeline import Ask, Context
from runs.tools.function import validation_errors

PRIOR_CONTEXT = "prior_context"
FACTS_PREAMBLE = (
    "Facts (verified and pinned; they take precedence over anything else in this conversation):\n"
)
PRIOR_PREAMBLE = (
    "Prior context from an earlier attempt of this work. It is not evidence and may be "
    "outdated; the facts above take precedence:\n"
)
PRIOR_LIMIT = 4000
# What the model is told when its answer does not validate, or its arguments do not fit.
ANSWER_AGAIN = "Your answer does not match the required output ({errors}). Answer again."
CALL_AGAIN = "The arguments do not fit {name} ({errors}); nothing was done. Call it again."
ACCEPTED = "Accepted: this is your final answer."


class LoopFailed(RuntimeError):
    """The loop cannot go on: a tool the loop does not offer, a turn without an answer, an
    answer that did not validate after its retries, or no answer within max_turns. The stage
    fails with it."""


@dataclass
class Conversation:
    """What a loop ends with: the model's final text, every message, the turns taken, the
    tool calls made and questions asked ({"call", "tool", "args", "result", and "edits" a
    reviewer made}), and the output: the validated `output_type` (None without one)."""

    final: str
    messages: list[dict[str, Any]]
    turns: int
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    output: Any = None


@dataclass
class _Progress:
    """One loop as it goes: the conversation, the count of calls per tool (the call ids),
    the calls made, the answers that did not validate, and the output once there is one."""

    messages: list[dict[str, Any]]
    counts: dict[str, int] = field(default_factory=dict)
    made: list[dict[str, Any]] = field(default_factory=list)
    refused: int = 0
    output: Any = None
    final: str = ""
    ended: bool = False


class AgentLoops:
    """The agent loops of a stage (its StageContext holds them and hands itself over: each
    turn and each tool the model requests is a ctx.call, each question a ctx.ask)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.run = ctx.run
        self.stage = ctx.stage
        self.inputs = ctx.inputs

    def converse(
        self,
        loop_id: str = "",
        *,
        model: str,
        task: str,
        facts: dict[str, Any] | None = None,
        tools: Any = None,
        model_tool: str = "model",
        max_turns: int = 8,
        params: dict[str, Any] | None = None,
        system: str = "",
        output_type: type[BaseModel] | None = None,
        tool_choice: str | None = None,
        output_retries: int = 1,
    ) -> Conversation:
        offer = loop_tools.offer(self.ctx, tools, output_type, tool_choice)
        request = _request(offer, params, output_type, tool_choice)
        progress = _Progress(self._opening(loop_id, task, facts, system))
        for turn in range(1, max_turns + 1):
            reply = self.ctx.call(
                _call_id(loop_id, f"turn-{turn}"),
                model_tool,
                model=model,
                messages=progress.messages,
                **request,
            )
            message = _message(reply, loop_id, turn)
            progress.messages = [*progress.messages, message]
            if message.get("tool_calls"):
                self._act(loop_id, offer, message["tool_calls"], progress)
            else:
                _answered(message, output_type, progress)
            if progress.refused > output_retries:
                raise LoopFailed(
                    f"the loop{_named(loop_id)}'s answer did not validate after "
                    f"{output_retries} retries: {progress.final}"
                )
            if progress.ended:
                return Conversation(
                    progress.final, progress.messages, turn, progress.made, progress.output
                )
        raise LoopFailed(f"the loop{_named(loop_id)} did not finish within {max_turns} turns")

    def _act(
        self, loop_id: str, offer: Offer, requests: list[dict[str, Any]], progress: _Progress
    ) -> None:
        """Each tool call of one turn, in the order asked; the result of each is a message."""
        for request in requests:
            name, arguments = _requested(request, offer)
            offered = offer.tools[name]
            if offered.output is not None:
                said = _final(offered, arguments, request, progress)
            else:
                said = self._tool(loop_id, offered, arguments, progress)
            progress.messages.append(
                {"role": "tool", "tool_call_id": request.get("id", ""), "content": said}
            )

    def _tool(
        self, loop_id: str, offered: Offered, arguments: dict[str, Any], progress: _Progress
    ) -> str:
        if offered.args is not None:
            try:
                offered.args.model_validate(arguments)
            except ValidationError as exc:
                return CALL_AGAIN.format(name=offered.name, errors=validation_errors(exc))
        progress.counts[offered.name] = progress.counts.get(offered.name, 0) + 1
        call_id = _call_id(loop_id, f"{offered.name}-{progress.counts[offered.name]}")
        if offered.ask is not None:
            result = self._ask(call_id, offered.ask, arguments["question"])
            progress.made.append(
                {"call": call_id, "tool": offered.name, "args": arguments, "result": result}
            )
            return _as_text(result)
        result = self.ctx.call(call_id, offered.tool, **arguments)
        made = {"call": call_id, "tool": offered.tool, "args": arguments, "result": result}
        said: Any = result
        review = self.ctx.review(call_id)
        if review is not None and review.edits:
            # The call was made with what the reviewer changed: the model must know it.
            edits = {name: {"asked": was, "sent": now} for name, (was, now) in review.edits.items()}
            reviewer = {"by": review.by, "edited": edits}
            if review.reason:
                reviewer["notes"] = review.reason
            said = {"result": result, "reviewer": reviewer}
            made["edits"] = edits
        progress.made.append(made)
        return _as_text(said)

    def _ask(self, gate_id: str, ask: Ask, question: str) -> dict[str, Any]:
        """The model's question as a gate: its heading the question (cut to fit, the whole of
        it then in the details)."""
        heading = question if len(question) <= MAX_QUESTION else question[: MAX_QUESTION - 1] + "…"
        return self.ctx.ask(
            gate_id,
            heading,
            form=AnswerForm,
            role=ask.role,
            timeout=ask.timeout,
            on_timeout=ask.on_timeout,
            escalate_to=ask.escalate_to,
            details=question if heading != question else "",
        )

    def _opening(
        self, loop_id: str, task: str, facts: dict[str, Any] | None, system: str
    ) -> list[dict[str, Any]]:
        """The instructions and the facts first: the pinned inputs the stage consumes and
        what the stage passes (its verified upstream outputs); then, on a branch, the
        parent's conversation as prior context; then the task."""
        known = {**{k: v for k, v in self.inputs.items() if v is not None}, **(facts or {})}
        stated = FACTS_PREAMBLE + json.dumps(known, sort_keys=True, default=str)
        messages = [{"role": "system", "content": f"{system}\n\n{stated}" if system else stated}]
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


def _requested(request: dict[str, Any], offer: Offer) -> tuple[str, dict[str, Any]]:
    function = request.get("function") or {}
    name = function.get("name", "")
    if name not in offer.tools:
        raise LoopFailed(
            f"the model asked for {name!r}, which this loop does not offer "
            f"({', '.join(offer.tools) or 'no tools'})"
        )
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError as exc:
        raise LoopFailed(f"the model's arguments for {name} are not JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise LoopFailed(f"the model's arguments for {name} are not an object")
    return name, arguments


def _request(
    offer: Offer,
    params: dict[str, Any] | None,
    output_type: type[BaseModel] | None,
    tool_choice: str | None,
) -> dict[str, Any]:
    """What every turn sends besides the model and the messages."""
    request = dict(params or {})
    ours = {"tools", "tool_choice", "response_format"} & set(request)
    if ours:
        raise ValueError(f"converse() sets {', '.join(sorted(ours))} itself: not in params")
    if offer.tools:
        request["tools"] = offer.schemas()
    if tool_choice is not None:
        request["tool_choice"] = tool_choice
    if output_type is not None and not offer.final:
        request["response_format"] = loop_tools.response_format(output_type)
    return request


def _answered(
    message: dict[str, Any], output_type: type[BaseModel] | None, progress: _Progress
) -> None:
    """A reply without tool calls: the answer, validated as the output when one is asked for;
    one that does not validate is asked again in the next turn."""
    content = message.get("content") or ""
    progress.final = content
    if output_type is None:
        progress.ended = True
        return
    try:
        progress.output = output_type.model_validate_json(content)
    except ValidationError as exc:
        progress.refused += 1
        errors = validation_errors(exc)
        progress.final = errors
        progress.messages.append({"role": "user", "content": ANSWER_AGAIN.format(errors=errors)})
        return
    progress.ended = True


def _final(
    offered: Offered, arguments: dict[str, Any], request: dict[str, Any], progress: _Progress
) -> str:
    """The final-answer tool's call: its arguments validated as the output (the loop ends
    after this turn's other calls), or the errors, for the model to call it again."""
    try:
        output = offered.output.model_validate(arguments)
    except ValidationError as exc:
        progress.refused += 1
        progress.final = validation_errors(exc)
        return CALL_AGAIN.format(name=offered.name, errors=progress.final)
    if isinstance(output, FinalAnswer):
        progress.final, progress.output = output.answer, None
    else:
        progress.final = (request.get("function") or {}).get("arguments") or "{}"
        progress.output = output
    progress.ended = True
    return ACCEPTED


def _as_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)

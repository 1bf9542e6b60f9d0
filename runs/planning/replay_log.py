"""What a stage already did in this run, for when it runs again (after a gate's answer, or a
strict resume): each call it made, by call id, with the request it was made with and what it
returned, and the values it took from the world (ctx.now(), ctx.uuid()).

The engine replays from it, so a re-entered stage continues on exactly the facts it had (the
facts a reviewer approved), and checks each call it asks for again against it: the same call
id with another request is a divergence (check()). The planner predicts with the same value,
so a plan prices a re-entry as what it is: replayed calls cost nothing.

The window is the stage's events in this run after its newest VERIFIED (a stage re-run after
its checkpoint failed to verify starts afresh). An upgrade branch is another run with no
window: it fetches anew, as the operator chose new facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runs.events import PlanDeviated, ToolCalled, ToolResult, Unreadable, ValueRecorded, read
from runs.ledger.chain import digest
from runs.models import EffectStatus, Event

__all__ = [
    "EMPTY",
    "Divergence",
    "RecordedCall",
    "ReplayLog",
    "replay_log",
    "replay_logs",
    "request_hash",
]

# A recorded call whose outcome made nothing: a request sent again with other arguments (a
# confirmation asked again after its target refused it, a call a supervisor abandoned) is a
# new request, not a divergence.
MADE_NOTHING = frozenset({EffectStatus.FAILED, EffectStatus.ABANDONED})
# How far back a window is read: the newest events of the stage's calls, so a plan of a run
# with a long log never loads all of it. A stage with more is replayed from its newest
# results, and makes older SAFE calls again (the engine and the planner read the same window,
# so the plan says so).
WINDOW_EVENTS = 10_000
# How much of a divergence its event keeps: the first differences, each value cut short.
DIFF_ENTRIES = 20
VALUE_CHARS = 200


def request_hash(tool: str, args: dict[str, Any]) -> str:
    """What identifies a call's request: its tool and its arguments, canonically."""
    return digest({"tool": tool, "args": args})


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """The newest request made under one call id in the window, and what it came to."""

    call_id: str
    tool: str
    policy: str
    key: str
    args: dict[str, Any]
    request_hash: str
    # A result the stage was handed (a SAFE call's is replayed from here; an effect's comes
    # back through the effect ledger, by its key).
    answered: bool = False
    result: Any = None
    status: str = ""

    def replays(self, req_hash: str) -> bool:
        """Whether this exact request's recorded result can be handed back without a call."""
        return self.answered and self.request_hash == req_hash

    @property
    def made_nothing(self) -> bool:
        return self.status in MADE_NOTHING


@dataclass(frozen=True, slots=True)
class Divergence:
    """A call asked for again with another request than the one recorded under its id."""

    recorded: RecordedCall
    key: str
    diff: list[dict[str, Any]]


@dataclass(frozen=True)
class ReplayLog:
    calls: dict[str, RecordedCall] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)
    # Call id -> tool: calls a resume was stopped before, its plan not having listed them (a
    # NEVER or RECONCILE_FIRST call the stage does not declare: contract.Difference). The
    # next plan lists them, so approving it promises them; without them each fresh plan
    # would be as blind to the call as the last, and every resume stop at the same place.
    stopped: dict[str, str] = field(default_factory=dict)

    def answered(self, call_id: str) -> bool:
        """Whether an earlier attempt was handed this call's result (a plan assumes the
        request comes out the same, as it does for an effect's)."""
        made = self.calls.get(call_id)
        return made is not None and made.answered

    def check(self, call_id: str, key: str, args: dict[str, Any], tool: str) -> Divergence | None:
        """A divergence, if this call id was made before with another key or request (a
        refused or abandoned request made nothing, and is no measure)."""
        made = self.calls.get(call_id)
        if made is None or made.made_nothing:
            return None
        if made.key == key and made.request_hash == request_hash(tool, args):
            return None
        diff = differences({"tool": made.tool, "args": made.args}, {"tool": tool, "args": args})
        if made.key != key:
            diff.insert(0, {"path": "key", "recorded": made.key, "asked": key})
        return Divergence(made, key, diff[:DIFF_ENTRIES])


EMPTY = ReplayLog()

# The events a window is read from; VERIFIED closes a window (a later attempt starts afresh).
WINDOW_TYPES = (
    Event.Type.TOOL_CALLED,
    Event.Type.TOOL_RESULT,
    Event.Type.VALUE_RECORDED,
    Event.Type.PLAN_DEVIATED,
    Event.Type.VERIFIED,
)


def replay_log(run_pk: int, stage: str, *, after_seq: int = 0) -> ReplayLog:
    """What `stage` recorded in run `run_pk` since its newest VERIFIED. One query, bounded
    below by `after_seq` (a checkpoint the stage came after) on the (run, seq) index."""
    return replay_logs(run_pk, [stage], after_seq=after_seq).get(stage, EMPTY)


def replay_logs(run_pk: int, stages: list[str], *, after_seq: int = 0) -> dict[str, ReplayLog]:
    """replay_log() of several stages, in one query (the planner's, for the stages a resume
    runs again)."""
    rows = Event.objects.filter(
        run_id=run_pk, seq__gt=after_seq, stage__in=stages, type__in=WINDOW_TYPES
    ).order_by("-seq")
    newest = rows.only("seq", "type", "stage", "idempotency_key", "payload")[:WINDOW_EVENTS]
    by_stage: dict[str, list[Event]] = {}
    for event in reversed(list(newest)):
        if event.type == Event.Type.VERIFIED:
            by_stage[event.stage] = []  # a later attempt starts afresh
        else:
            by_stage.setdefault(event.stage, []).append(event)
    return {stage: _log(events) for stage, events in by_stage.items()}


def _log(events: list[Event]) -> ReplayLog:
    calls: dict[str, RecordedCall] = {}
    values: dict[str, str] = {}
    stopped: dict[str, str] = {}
    for event in events:
        said = _read(event)
        if isinstance(said, ToolCalled):
            args = said.args or {}
            calls[said.call] = RecordedCall(
                said.call, said.tool, said.policy, said.idempotency_key, args,
                request_hash(said.tool, args),
            )  # fmt: skip
        elif isinstance(said, ToolResult) and not (said.replayed or said.reused):
            made = calls.get(said.call)
            if made is not None:
                calls[said.call] = _answered(made, said)
        elif isinstance(said, ValueRecorded):
            values[said.name] = said.value
        elif isinstance(said, PlanDeviated) and (said.difference or {}).get("stopped_before_call"):
            stopped[said.difference["call"]] = said.difference["tool"]
    return ReplayLog(calls, values, stopped)


def _read(event: Event) -> Any:
    try:
        return read(event, whole=True)
    except Unreadable:
        # A stored payload whose artifact is gone: nothing to replay from it (a SAFE call is
        # made again; an effect still has its ledger row).
        return None


def _answered(made: RecordedCall, result: ToolResult) -> RecordedCall:
    status = result.status or ("" if not result.skipped else EffectStatus.ABANDONED)
    answered = status not in MADE_NOTHING and not result.error
    return RecordedCall(
        made.call_id, made.tool, made.policy, made.key, made.args, made.request_hash,
        answered, result.result if answered else None, status,
    )  # fmt: skip


def differences(recorded: Any, asked: Any, path: str = "") -> list[dict[str, Any]]:
    """Where two JSON values differ, as paths ("args.messages[0].content") with both values
    cut short: what a divergence's event and page show."""
    if isinstance(recorded, dict) and isinstance(asked, dict):
        found = []
        for name in sorted(set(recorded) | set(asked), key=str):
            where = f"{path}.{name}" if path else str(name)
            found += differences(recorded.get(name, MISSING), asked.get(name, MISSING), where)
        return found
    if isinstance(recorded, list) and isinstance(asked, list) and len(recorded) == len(asked):
        found = []
        for index, (old, new) in enumerate(zip(recorded, asked, strict=True)):
            found += differences(old, new, f"{path}[{index}]")
        return found
    if digest({"v": _plain(recorded)}) == digest({"v": _plain(asked)}):
        return []
    return [{"path": path or "request", "recorded": _cut(recorded), "asked": _cut(asked)}]


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


MISSING = _Missing()


def _plain(value: Any) -> Any:
    return "(absent)" if value is MISSING else value


def _cut(value: Any) -> Any:
    if value is MISSING:
        return None
    if isinstance(value, str):
        return value if len(value) <= VALUE_CHARS else value[:VALUE_CHARS] + "…"
    if isinstance(value, bool | int | float) or value is None:
        return value
    text = digest({"v": value})
    return f"({type(value).__name__}, sha256 {text[:12]})"

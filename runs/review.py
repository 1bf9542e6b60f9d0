"""A human in the pipeline API (runs.pipeline names all of these): `Confirm`, a tool's call
that needs a human first, and `OnTimeout`, what a gate's deadline does; then what a stage
learns of the answer: `Review`, which `ctx.review(call_id)` returns once a confirmed call (or a question)
used its answer, and `OnReject`, what a rejected confirmation does in the stage. An agent
loop can tell its model what the reviewer changed, or hand the reviewer's feedback back to
it instead of failing the stage; `Ask` is a tool of an agent loop with which the model asks
the human a question."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from runs.models import GateRole

# What `when` is handed: the stage's runs.pipeline.Context, which is not imported here, so the
# pipeline API can name everything in this module without an import circle.
StageContext = Any


class OnReject(StrEnum):
    # ctx.call raises CallRejected (with .reason and .by): the stage fails unless it catches it.
    RAISE = "raise"
    # ctx.call returns {"rejected": True, "by": ..., "reason": ...} as the call's result.
    RETURN = "return"


@dataclass(frozen=True)
class Review:
    """One gate's recorded answer as the stage sees it."""

    # "approve" or "reject" for a confirmation; a question's own decision field, if it has one.
    decision: str
    by: str
    at: datetime | None
    # Why it was rejected (a confirmation's reason; a question's notes).
    reason: str = ""
    # What the reviewer changed: {name: [shown, answered]} (a confirmation's arguments).
    edits: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def approved(self) -> bool:
        return self.decision == "approve"

    def as_result(self) -> dict[str, Any]:
        """A rejection as a call's result (OnReject.RETURN), for a model loop to read."""
        return {"rejected": True, "by": self.by, "reason": self.reason}


@dataclass(frozen=True)
class OnTimeout:
    """What happens when a gate's deadline passes: the `answer` is recorded as given by the
    time-out, or the run fails with `reason`."""

    answer: dict[str, Any] | None = None
    fail: bool = False
    reason: str = ""

    @classmethod
    def default(cls, answer: dict[str, Any]) -> OnTimeout:
        return cls(answer=dict(answer))

    @classmethod
    def failing(cls, reason: str = "nobody answered in time") -> OnTimeout:
        return cls(fail=True, reason=reason)

    def to_dict(self) -> dict[str, Any]:
        if self.fail:
            return {"fail": True, "reason": self.reason}
        return {"answer": self.answer} if self.answer is not None else {}


@dataclass(frozen=True)
class Confirm:
    """A tool's call needs a human first. `when(ctx, args)` says whether this call does (for
    example "charges over $100"; always, by default); `editable` names the arguments the
    reviewer may change. An edited call is made with exactly the edited arguments, under the
    delivery key of the edited request; `limits` bound an edit further (pydantic Fields).
    `description` (markdown) is shown beside the call; `on_reject` says whether a rejection
    raises CallRejected or is the call's result."""

    when: Callable[[StageContext, dict[str, Any]], bool] | None = None
    description: str = ""
    on_reject: OnReject = OnReject.RAISE
    role: str = GateRole.OPERATOR
    editable: tuple[str, ...] = ()
    quorum: int = 1
    timeout: timedelta | None = None
    on_timeout: OnTimeout | None = None
    escalate_to: str = ""
    limits: dict[str, Any] = field(default_factory=dict, hash=False)

    def required(self, ctx: StageContext, args: dict[str, Any]) -> bool:
        return True if self.when is None else bool(self.when(ctx, args))


@dataclass(frozen=True)
class Ask:
    """A tool an agent loop offers its model to ask a human (ctx.converse(tools=[Ask(...)])):
    the model calls it with {"question": ...}; the loop asks it as a gate (ctx.ask: the run
    waits with no worker, and the answer queues the stage again) and hands the answer back as
    the tool's result ({"answer": ...}; an `on_timeout` default answer has that shape)."""

    name: str = "ask_human"
    description: str = (
        "Ask the human you work for a question when you need information only they have. "
        "Their answer is this tool's result."
    )
    role: str = GateRole.OPERATOR
    timeout: timedelta | None = None
    on_timeout: OnTimeout | None = None
    escalate_to: str = ""

"""What a stage learns of a human's answer (part of the pipeline API; runs.pipeline names
them): `Review`, which `ctx.review(call_id)` returns once a confirmed call (or a question)
used its answer, and `OnReject`, what a rejected confirmation does in the stage. An agent
loop can tell its model what the reviewer changed, or hand the reviewer's feedback back to
it instead of failing the stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


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

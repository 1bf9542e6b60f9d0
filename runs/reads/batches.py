"""A group approval's page (/runs/batches/<id>/): what became of each run it approved."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runs.models import Run


@dataclass(frozen=True)
class Approved:
    """One approved run of a batch as a GroupApproval row keeps it, with its run now."""

    run: int
    resumed: int
    branch: bool
    stage: str
    # The resumed run (the branch, for an upgrade) as it is now; None if it is gone.
    now: Run | None

    @property
    def finished(self) -> bool:
        return self.now is not None and self.now.status in Run.TERMINAL

    @property
    def active(self) -> bool:
        return self.now is not None and self.now.is_active

    @property
    def outcome(self) -> str:
        """What it is doing now, in a few words beside its status's badge (which the words
        do not repeat): a stage a worker runs, or one still waiting for a worker (its ticket
        not taken yet: with one worker, all but one of a batch wait)."""
        if self.now is None:
            return "no longer exists"
        stage = self.now.current_stage or "its next stage"
        if self.now.is_active:
            return f"waiting for a worker to run {stage}" if self.now.ticket else f"runs {stage}"
        if self.now.status in Run.TERMINAL:
            return ""
        return f"stopped again at {stage}"


def approved_now(approved: list[dict[str, Any]]) -> list[Approved]:
    """The batch's approved runs with their current status: one query."""
    pks = [int(a["resumed"]) for a in approved]
    runs = Run.objects.only("id", "status", "current_stage", "attention", "ticket").in_bulk(pks)
    return [
        Approved(
            run=int(a["run"]),
            resumed=int(a["resumed"]),
            branch=bool(a.get("branch")),
            stage=str(a.get("stage") or ""),
            now=runs.get(int(a["resumed"])),
        )
        for a in approved
    ]

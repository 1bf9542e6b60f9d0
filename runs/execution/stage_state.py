"""What the parts of a stage's context share: its calls (durable_call.py) and its gates
(asking.py) write with the same writer under the same lease, add to the same usage, and hold
their decisions against the same approved plan, whose first departure is recorded once,
whoever finds it. context.py builds one per stage job and hands it to each part, which reads
it as a `StagePart`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runs.events import PlanDeviated
from runs.execution.hooks import CallHooks
from runs.ledger import leases
from runs.ledger.append import RunMove, Writer, append
from runs.models import Run
from runs.pipeline import Context, Pipeline, Stage
from runs.planning import contract
from runs.planning.contract import Contract, Usage
from runs.planning.replay_log import ReplayLog, replay_log


class StageStopped(Exception):
    """The stage cannot go on; the run's new status and its event are already written."""


@dataclass(slots=True)
class StageState:
    # What a tool's key function and the hooks are handed: the stage's context, not a part.
    ctx: Context
    writer: Writer
    # The lease as this worker knows it: fences each external call without a read.
    held: leases.HeldLease | None
    run: Run
    pipeline: Pipeline
    spec: Stage
    hooks: CallHooks
    # What this stage used: recorded in its VERIFIED event, summed against the plan.
    usage: Usage
    # The approved plan this resumed work is bound by (None on a first execution), and
    # whether it was already departed from (by this stage or an earlier one).
    contract: Contract | None
    deviated: bool
    # What this stage recorded in this run before this attempt (replay_log.py): None until
    # first needed, when it is read (a stage the engine knows is entered afresh is handed
    # the empty log, and reads nothing).
    replay: ReplayLog | None = None
    # Where that read may start: the checkpoint the stage came after (its events are later).
    replay_after: int = 0

    def replayed(self) -> ReplayLog:
        """What this stage's earlier attempts in this run recorded, read once per attempt;
        before this attempt writes anything it replays, so the read is of earlier ones."""
        if self.replay is None:
            self.replay = replay_log(self.run.pk, self.spec.name, after_seq=self.replay_after)
        return self.replay

    def deviate(self, reason: str, **details: Any) -> None:
        """Append PLAN_DEVIATED, once per approved plan, with what was used against it."""
        used = contract.used_since(self.run, self.contract)
        used.add(self.usage)
        deviated = PlanDeviated(
            stage=self.spec.name, reason=reason, **self.contract.verdict_payload(used), **details
        )
        append(self.writer, deviated, move=RunMove(deviated=True))
        self.deviated = True


class StagePart:
    """A part of a stage's context (its calls, its gates): what it uses of the shared state,
    each a reference of its own, so the hot path looks each up once. Whether the work departed
    from its plan is read off the state itself, where every part sees the same answer."""

    def __init__(self, state: StageState) -> None:
        self.state = state
        self.ctx = state.ctx
        self.writer = state.writer
        self.held = state.held
        self.run = state.run
        self.pipeline = state.pipeline
        self.spec = state.spec
        self.stage = state.spec.name
        self.hooks = state.hooks
        self.usage = state.usage
        self.contract = state.contract

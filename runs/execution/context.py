"""StageContext: what a stage function sees (pipeline.Context is its type for pipeline code).
It reads the run's pinned inputs and its upstream checkpoints here; it holds its tool calls
(durable_call.py), its gates (asking.py), what an earlier attempt recorded (reentry.py: the
replayed calls and values, now() and uuid()) and its agent loops (agent_loop.py) as parts, which
share one StageState (stage_state.py), and hands each method of pipeline.Context to its part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runs.execution.agent_loop import AgentLoops
from runs.execution.asking import Asking
from runs.execution.durable_call import DurableCalls
from runs.execution.hooks import CallHooks
from runs.execution.reentry import Reentry
from runs.execution.stage_state import StageState
from runs.ledger import artifacts, leases
from runs.ledger.append import Writer
from runs.ledger.checkpoints import latest_checkpoint
from runs.models import Checkpoint, Run
from runs.pipeline import Pipeline
from runs.planning.contract import Contract, Usage
from runs.planning.replay_log import ReplayLog


class _Handed:
    """A method of pipeline.Context that a part of the context owns, written once, on the
    part: read on a context it is the part's bound method; read on the class, the part's
    function, whose parameters tests/test_pipeline_context.py holds to the protocol's."""

    def __init__(self, part: str, method: Callable[..., Any]) -> None:
        self.part = part
        self.method = method
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, ctx: Any, owner: type | None = None) -> Callable[..., Any]:
        if ctx is None:
            return self.method
        return getattr(getattr(ctx, self.part), self.name)


class ConsumedInputs(dict):
    """The run's inputs the stage consumes: another of the run's inputs, read here, is said to
    be missing from the stage's `consumes` (a bare KeyError named only the input). A stage
    reads only what it declares: what it consumes is what a plan pins and an upgrade
    compares."""

    def __init__(self, stage: str, consumed: dict[str, Any], pinned: dict[str, Any]) -> None:
        super().__init__(consumed)
        self._stage, self._pinned = stage, pinned

    def __missing__(self, name: str) -> Any:
        if name in self._pinned:
            raise KeyError(
                f"stage {self._stage} reads input {name!r}, which it does not consume: add it "
                f"to Stage(consumes=...)"
            )
        raise KeyError(name)


class StageContext:
    """What a stage function may do: read its pinned inputs and upstream outputs, call tools
    through the effect ledger, ask a human, and run an agent loop."""

    def __init__(
        self,
        writer: Writer,
        run: Run,
        pipeline: Pipeline,
        stage: str,
        hooks: CallHooks | None = None,
        *,
        held: leases.HeldLease | None = None,
        contract: Contract | None = None,
        deviated: bool = False,
        replay: ReplayLog | None = None,
        replay_after: int = 0,
    ) -> None:
        self.writer = writer
        self.held = held
        self.run = run
        self.pipeline = pipeline
        self.stage = stage
        self.hooks = hooks or CallHooks()
        spec = pipeline.stage(stage)
        self.inputs = ConsumedInputs(
            spec.name, {name: run.inputs.get(name) for name in spec.consumes}, run.inputs
        )
        self.contract = contract
        self.usage = Usage()
        self.state = StageState(
            ctx=self,
            writer=writer,
            held=held,
            run=run,
            pipeline=pipeline,
            spec=spec,
            hooks=self.hooks,
            usage=self.usage,
            contract=contract,
            deviated=deviated,
            replay=replay,
            replay_after=replay_after,
        )
        # What an earlier attempt of this stage in this run recorded, replayed.
        self._reentry = Reentry(self.state)
        self._gates = Asking(self.state, self._reentry.question_changed)
        # A call that needs a human's confirmation asks the gates first.
        self._calls = DurableCalls(self.state, self._gates.confirmed, self._reentry)
        self._loops = AgentLoops(self)
        # The checkpoints this stage read, by stage. While it holds the lease nobody else
        # verifies a stage of this run, so the newest checkpoint of a stage stays the one
        # read: a stage that reads its upstream twice reads it once.
        self._upstream: dict[str, Checkpoint] = {}

    def read_upstream(self, checkpoint: Checkpoint | None) -> None:
        """Say that `checkpoint` is the run's newest, read as the lease was taken: the newest
        of its stage too, so upstream() of that stage costs no read."""
        if checkpoint is not None:
            self._upstream[checkpoint.stage] = checkpoint

    @property
    def run_id(self) -> str:
        return self.run.public_id

    @property
    def root_id(self) -> str:
        return self.run.root.public_id

    def upstream(self, stage: str) -> Checkpoint:
        checkpoint = self._upstream.get(stage) or latest_checkpoint(self.run, stage)
        if checkpoint is None:
            raise LookupError(f"{self.run.public_id} has no verified {stage} checkpoint")
        self._upstream[stage] = checkpoint
        return checkpoint

    def upstream_artifact(self, stage: str, name: str) -> bytes:
        for entry in self.upstream(stage).artifacts:
            if entry["name"] == name:
                return artifacts.read_verified(entry["uri"], entry["sha256"])
        raise LookupError(f"the {stage} checkpoint has no artifact {name!r}")

    # The parts' faces: pipeline.Context's methods, each handed to the part that owns it.

    def call(self, call_id: str, tool_name: str, **args: Any) -> Any:
        return self._calls.call(call_id, tool_name, args)

    review = _Handed("_gates", Asking.review)
    ask = _Handed("_gates", Asking.ask)
    converse = _Handed("_loops", AgentLoops.converse)
    now = _Handed("_reentry", Reentry.now)
    uuid = _Handed("_reentry", Reentry.uuid)

    # The approved plan, for the engine's verdict at the stage's end.

    @property
    def deviated(self) -> bool:
        return self.state.deviated

    def deviate(self, reason: str, **details: Any) -> None:
        self.state.deviate(reason, **details)

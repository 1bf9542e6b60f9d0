"""StageContext: what a stage function sees (pipeline.Context is its type for pipeline code).
It reads the run's pinned inputs and its upstream checkpoints here, and calls tools through
the durable call it inherits (durable_call.py)."""

from __future__ import annotations

from runs.execution.agent_loop import AgentLoops
from runs.execution.asking import Asking
from runs.execution.durable_call import DurableCalls
from runs.execution.hooks import CallHooks
from runs.ledger import artifacts, leases
from runs.ledger.append import Writer
from runs.ledger.checkpoints import latest_checkpoint
from runs.models import Checkpoint, Run
from runs.pipeline import Pipeline
from runs.planning.contract import Contract, Usage
from runs.review import Review


class StageContext(DurableCalls, Asking, AgentLoops):
    """What a stage function may do: read its pinned inputs and upstream outputs, call tools
    through the effect ledger, ask a human, and run an agent loop (agent_loop.py)."""

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
    ) -> None:
        self.writer = writer
        # The lease as this worker knows it: fences each external call without a read.
        self.held = held
        self.run = run
        self.pipeline = pipeline
        self.stage = stage
        self.hooks = hooks or CallHooks()
        self._spec = pipeline.stage(stage)
        self.inputs = {name: run.inputs.get(name) for name in self._spec.consumes}
        # The approved plan this resumed work is bound by (None on a first execution), and
        # whether it was already departed from.
        self.contract = contract
        self.deviated = deviated
        # What this stage used: recorded in its VERIFIED event, summed against the plan.
        self.usage = Usage()
        # The checkpoints this stage read, by stage. While it holds the lease nobody else
        # verifies a stage of this run, so the newest checkpoint of a stage stays the one
        # read: a stage that reads its upstream twice reads it once.
        self._upstream: dict[str, Checkpoint] = {}
        # The gates' answers this stage used, by gate id: what ctx.review() reports.
        self._reviews: dict[str, Review] = {}

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

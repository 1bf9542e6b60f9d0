"""StageContext: what a stage function sees (pipeline.Context is its type for pipeline code).
It reads the run's pinned inputs and its upstream checkpoints here; it holds its tool calls
(durable_call.py), its gates (asking.py) and its agent loops (agent_loop.py) as parts, which
share one StageState (stage_state.py), and hands each method of pipeline.Context to its part.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from runs.execution.agent_loop import AgentLoops, Conversation
from runs.execution.asking import Asking
from runs.execution.durable_call import DurableCalls
from runs.execution.hooks import CallHooks
from runs.execution.stage_state import StageState
from runs.ledger import artifacts, leases
from runs.ledger.append import Writer
from runs.ledger.checkpoints import latest_checkpoint
from runs.models import Checkpoint, GateRole, Run
from runs.pipeline import OnTimeout, Pipeline
from runs.planning.contract import Contract, Usage
from runs.review import Review

if TYPE_CHECKING:
    from pydantic import BaseModel


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
    ) -> None:
        self.writer = writer
        self.held = held
        self.run = run
        self.pipeline = pipeline
        self.stage = stage
        self.hooks = hooks or CallHooks()
        spec = pipeline.stage(stage)
        self.inputs = {name: run.inputs.get(name) for name in spec.consumes}
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
        )
        self._gates = Asking(self.state)
        # A call that needs a human's confirmation asks the gates first.
        self._calls = DurableCalls(self.state, self._gates.confirmed)
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

    def review(self, call_id: str) -> Review | None:
        return self._gates.review(call_id)

    def ask(
        self,
        gate_id: str,
        question: str,
        *,
        form: Any = None,
        initial: dict[str, Any] | None = None,
        role: str = GateRole.OPERATOR,
        quorum: int = 1,
        timeout: timedelta | None = None,
        on_timeout: OnTimeout | None = None,
        escalate_to: str = "",
        details: str = "",
    ) -> dict[str, Any]:
        return self._gates.ask(
            gate_id,
            question,
            form=form,
            initial=initial,
            role=role,
            quorum=quorum,
            timeout=timeout,
            on_timeout=on_timeout,
            escalate_to=escalate_to,
            details=details,
        )

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
        return self._loops.converse(
            loop_id,
            model=model,
            task=task,
            facts=facts,
            tools=tools,
            model_tool=model_tool,
            max_turns=max_turns,
            params=params,
            system=system,
            output_type=output_type,
            tool_choice=tool_choice,
            output_retries=output_retries,
        )

    # The approved plan, for the engine's verdict at the stage's end.

    @property
    def deviated(self) -> bool:
        return self.state.deviated

    def deviate(self, reason: str, **details: Any) -> None:
        self.state.deviate(reason, **details)

"""One run of an agent inside a stage: the stage's context, the call ids it hands out and the
stop that ends it.

The SDK's Runner is asynchronous; Resumer's calls are not (a durable call holds the stage's
lease, writes through the stage's database connection and is fenced on the stage's thread).
So the Runner runs on an event loop of its own (asgiref's async_to_sync) while the stage's
thread waits for it, and every call comes back to that thread (sync_to_async with
thread_sensitive=True): the ledger is written by the thread that holds the lease, on its one
database connection, one call at a time, and Django never sees a database call from inside an
event loop.

Call ids are counted as the run goes, never drawn at random, so a stage run again (after a
gate's answer, on a strict resume) asks each call under the id it had: `turn-N` for the N-th
model turn, `<tool>-N` for the N-th call of a tool, numbered in the order the model asked for
them (a turn's calls are named when its answer arrives, not when they run).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from runs.pipeline import Context, ToolRejected


@dataclass
class Session:
    """What one `OpenAIAgent.run` shares between its model and its tools."""

    ctx: Context
    model_tool: str
    tools: frozenset[str]
    loop_id: str = ""
    turns: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    # The model's id of a tool call (the SDK's tool_call_id) → the call id it is made under.
    named: dict[str, str] = field(default_factory=dict)
    # What stopped the stage (a gate opened, a call whose outcome is unknown, a divergence):
    # the SDK wraps what a tool raises, and may run a sibling tool meanwhile; the stage ends
    # with this, and no call is made after it.
    stopped: BaseException | None = None

    def _id(self, name: str) -> str:
        return f"{self.loop_id}.{name}" if self.loop_id else name

    def next_turn(self) -> str:
        self.turns += 1
        return self._id(f"turn-{self.turns}")

    def name_calls(self, requested: Iterable[tuple[str, str]]) -> None:
        """Number the tool calls of one model answer ((tool name, the model's call id)), in
        the order the model gave them."""
        for tool, model_call_id in requested:
            if tool not in self.tools or model_call_id in self.named:
                continue
            self.counts[tool] = self.counts.get(tool, 0) + 1
            self.named[model_call_id] = self._id(f"{tool}-{self.counts[tool]}")

    def call_id_of(self, tool: str, model_call_id: str) -> str:
        if model_call_id not in self.named:
            self.name_calls([(tool, model_call_id)])
        return self.named[model_call_id]

    def call(self, call_id: str, tool: str, args: dict[str, Any], *, refusable: bool) -> Any:
        """ctx.call on the stage's thread. A refusal (`refusable`: a tool's target refused,
        nothing happened there) is raised for the caller to tell the model; anything else that
        stops the call stops the run of the agent, and every call after it."""
        if self.stopped is not None:
            raise StopAgent(self.stopped)
        try:
            return self.ctx.call(call_id, tool, **args)
        except ToolRejected as exc:
            if not refusable:
                self.stopped = exc
            raise
        except BaseException as exc:
            self.stopped = exc
            raise


class StopAgent(Exception):
    """A call asked for after the stage was stopped: never made."""

    def __init__(self, stopped: BaseException) -> None:
        super().__init__(f"the stage stopped before this call ({type(stopped).__name__})")
        self.stopped = stopped

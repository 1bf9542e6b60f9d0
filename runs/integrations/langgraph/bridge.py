"""The stage's context, reached from a graph's threads.

A stage's context is the stage's thread's: it holds the run's lease, writes the ledger on
that thread's database connection, and its calls are made one at a time. LangGraph runs a
node's tools on a thread pool (ToolNode), and parallel branches on threads of their own. So
the graph runs on a thread beside the stage's, and every ledger operation it asks for (a
model turn, a tool call, a question) is carried back to the stage's thread and made there,
one after the other, in the order asked:

    stage thread: Bridge.run(work) ──starts──▶ graph thread: work() → graph.invoke(...)
        serves each operation in turn  ◀──ask(op)── a node, a tool, the chat model
        ctx.call(...) → the tool's call → in_graph(fn) ──▶ the asking thread runs fn
                                            (the SDK's tool, with its LangGraph config)

What a call comes to is handed back to the thread that asked: its result, or a refusal
(ToolRejected: nothing happened, the graph may handle it). Anything else that stops the
stage (a gate opened, an unknown outcome recorded, the lease lost, a divergence) is raised
on the stage's thread as the engine expects, and the graph's threads are stopped with
GraphStopped, a BaseException, so that no retry policy of the graph runs the node again.

The counts that name the calls are kept here too (`Numbering`): the same graph asks the same
calls in the same order on every attempt, so `turn-3` or `send_email-2` names the same call
each time, and a tool call the model asked for keeps the number given when its turn
answered, whichever pool thread runs it.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar, copy_context
from typing import Any

from django.db import connections

from runs.pipeline import Context, ToolRejected

# How long a stopped stage waits for its graph's thread to unwind before it gives the
# worker back anyway (the thread can no longer reach the ledger: every ask raises).
STOP_JOIN_SECONDS = 10.0
NESTED = (
    "a durable tool called the model or another durable tool from inside itself: the ledger "
    "records one call at a time, so call them from a node instead"
)

_current: ContextVar[Bridge | None] = ContextVar("resumer_langgraph_bridge", default=None)
# The bridge a worker process is serving, for a thread the graph started without copying its
# context (a library's own pool): a worker runs one stage at a time.
_serving: list[Bridge] = []

_OK, _ERR, _RUN, _STOP = "ok", "err", "run", "stop"


class GraphStopped(BaseException):
    """The stage stopped (a gate, a failure, a lost lease): the graph's thread unwinds."""


def current() -> Bridge | None:
    """The bridge of the stage this thread works for, or None outside a Resumer stage."""
    found = _current.get()
    if found is None and _serving:
        return _serving[-1]
    return found


class Numbering:
    """The call ids of one attempt: model turns (`turn-N`), tool calls (`<tool>-N`) and
    interrupts (`<node>.interrupt-N`), each counted in the order the graph asks."""

    def __init__(self, tools: Iterable[str]) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, itertools.count] = {}
        self._tools = frozenset(tools)
        self._assigned: dict[str, str] = {}

    def _next(self, name: str) -> int:
        return next(self._counts.setdefault(name, itertools.count(1)))

    def turn(self) -> str:
        with self._lock:
            return f"turn-{self._next('turn')}"

    def interrupt(self, node: str) -> str:
        with self._lock:
            return f"{node}.interrupt-{self._next(f'{node}.interrupt')}"

    def assign(self, requested: Iterable[tuple[str, str]]) -> None:
        """Number the tool calls a model turn asked for, (name, tool call id) in the order
        asked, before any runs: parallel calls get the same ids on every attempt."""
        with self._lock:
            for name, tool_call_id in requested:
                if name in self._tools and tool_call_id:
                    self._assigned[tool_call_id] = f"{name}-{self._next(name)}"

    def tool(self, name: str, tool_call_id: str | None) -> str:
        """A tool call's id: the one its model turn gave it, else the next of its tool (a
        node that invokes the tool itself)."""
        with self._lock:
            if tool_call_id and tool_call_id in self._assigned:
                return self._assigned.pop(tool_call_id)
            return f"{name}-{self._next(name)}"


class Bridge:
    """One stage attempt's way from the graph's threads to the stage's context."""

    def __init__(
        self, ctx: Context, *, tools: Iterable[str] = (), models: str | Mapping[str, str] = ""
    ) -> None:
        self.ctx = ctx
        self.numbering = Numbering(tools)
        self._models = models
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stopped: BaseException | None = None
        # The reply box of the operation the stage's thread is making, and the tool runner
        # its call hands to the asking thread (DurableTool).
        self._serving_box: queue.SimpleQueue | None = None
        self.runner: Callable[[dict[str, Any], str], Any] | None = None
        self._local = threading.local()

    def model(self, declared: str) -> str:
        """The model a chat model declared as `declared` asks in this run: the stage's
        choice (one name for every chat model, or a mapping), else its own."""
        if isinstance(self._models, Mapping):
            return self._models.get(declared, declared)
        return self._models or declared

    # --- the graph's side ------------------------------------------------------------------

    def ask(self, operation: Callable[[], Any]) -> Any:
        """Have the stage's thread make `operation` (a ctx call), and return what it gave."""
        if getattr(self._local, "in_tool", False):
            raise RuntimeError(NESTED)
        box: queue.SimpleQueue = queue.SimpleQueue()
        with self._lock:
            if self._stopped is not None:
                raise GraphStopped(str(self._stopped))
            self._inbox.put((operation, box))
        while True:
            kind, value = box.get()
            if kind == _RUN:
                self._run_here(*value)
            elif kind == _OK:
                return value
            elif kind == _ERR:
                raise value
            else:
                raise GraphStopped(str(value))

    def _run_here(self, fn: Callable[[], Any], reply: queue.SimpleQueue) -> None:
        self._local.in_tool = True
        try:
            reply.put((_OK, fn()))
        except BaseException as exc:  # handed to the stage's thread, which records it
            reply.put((_ERR, exc))
        finally:
            self._local.in_tool = False

    # --- the stage's side ------------------------------------------------------------------

    def in_graph(self, fn: Callable[[], Any]) -> Any:
        """From inside the operation being made: run `fn` on the thread that asked for it
        (a tool's own code, with its LangGraph config), and return what it returned."""
        if self._serving_box is None:
            raise RuntimeError("in_graph() is for the operation the stage is making")
        reply: queue.SimpleQueue = queue.SimpleQueue()
        self._serving_box.put((_RUN, (fn, reply)))
        kind, value = reply.get()
        if kind == _ERR:
            raise value
        return value

    def run(self, work: Callable[[], Any]) -> Any:
        """Run `work` (the graph) on a thread of its own and make, here, every operation it
        asks for, until it ends; return what it returned, or raise what it raised."""
        finished = object()
        outcome: dict[str, Any] = {}

        def main() -> None:
            try:
                outcome["value"] = work()
            except BaseException as exc:
                outcome["error"] = exc
            finally:
                connections.close_all()  # this thread's, if a tool of the graph opened any
                self._inbox.put(finished)

        token = _current.set(self)
        thread = threading.Thread(target=copy_context().run, args=(main,), daemon=True)
        _serving.append(self)
        try:
            thread.start()
            while (item := self._inbox.get()) is not finished:
                self._serve(*item)
        except BaseException as exc:
            self._stop(exc)
            thread.join(STOP_JOIN_SECONDS)
            raise
        finally:
            _serving.remove(self)
            _current.reset(token)
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")

    def _serve(self, operation: Callable[[], Any], box: queue.SimpleQueue) -> None:
        self._serving_box = box
        try:
            value = operation()
        except ToolRejected as exc:  # nothing happened there: the graph's to handle
            box.put((_ERR, exc))
            return
        except BaseException as exc:
            box.put((_STOP, exc))
            raise
        finally:
            self._serving_box = None
            self.runner = None
        box.put((_OK, value))

    def _stop(self, reason: BaseException) -> None:
        """No operation is made from now on: those waiting are told to stop, and so is any
        asked later."""
        with self._lock:
            self._stopped = reason
            while True:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, tuple):
                    item[1].put((_STOP, reason))

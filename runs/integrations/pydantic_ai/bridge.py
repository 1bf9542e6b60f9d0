"""One agent run inside a stage: the SDK's event loop on a thread of its own, every durable
call on the stage's thread.

Pydantic AI is async: its model requests and tool calls are coroutines, and `run_sync` drives
them with an event loop on the calling thread. Django refuses database access from a thread
whose event loop is running (SynchronousOnlyOperation), and everything `ctx.call` does (the
intent, the outcome, the lease's fence, the stage log, the fault hooks) belongs on the stage
job's own thread and its own connection. So the agent's run gets a thread and a loop of its
own, and the stage thread serves it:

    stage thread                               agent thread (asyncio)
    Bridge.run(main) ─ starts ─────────────▶   main(): the SDK's run
        serves requests, one at a time   ◀──   await durable(work): a model turn, a tool call
        work(): ctx.call(...) ─┐
            the tool's body ───┼─ RUN ─────▶   runs in the requesting task (its contextvars,
                               │   ◀─────────   the run's context), answers
        the call's result ─────┴─ DONE ────▶   durable() returns it
    ...
    a call raises (a gate opened, the lease lost, the run stopped): the agent's task is
    cancelled, its thread joined, and the exception raised on the stage thread, as any stage
    raises it.

Nothing on the agent's thread touches the database; nothing on the stage thread awaits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from runs.pipeline import Context

_DONE, _RUN, _STOP = "done", "run", "stop"
_FINISHED = object()

# The bridge of the agent run in progress: set on the stage thread while it serves, and in
# the agent's task (the model's transport and the toolsets read it there).
_active: ContextVar[Bridge | None] = ContextVar("resumer_pydantic_ai_bridge", default=None)


class NotInStage(RuntimeError):
    """A durable call asked for outside a ResumerAgent's run_sync inside a stage."""


def current() -> Bridge:
    bridge = _active.get()
    if bridge is None:
        raise NotInStage(
            "a ResumerAgent's model and tools run inside a stage: "
            "agent.run_sync(prompt, ctx=ctx, ...) from the stage function"
        )
    return bridge


@dataclass
class _Request:
    """One durable call the agent asks for: what the stage thread does for it, and the job a
    tool's body is (the agent's own coroutine, run in the asking task when the call is made)."""

    work: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    inbox: asyncio.Queue
    job: Callable[..., Awaitable[Any]] | None = None


class Bridge:
    """The agent's thread and the stage's thread for one run of an agent (see the module)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._serving: _Request | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None

    # --- the stage thread ------------------------------------------------------------------

    def run(self, main: Callable[[], Awaitable[Any]]) -> Any:
        """Run `main()` on the agent's thread, serving its durable calls here until it ends;
        its result, or its exception (or the exception a durable call raised here)."""
        outcome: concurrent.futures.Future = concurrent.futures.Future()
        thread = threading.Thread(
            target=self._drive, args=(main, outcome), name="resumer-agent", daemon=True
        )
        token = _active.set(self)
        thread.start()
        try:
            self._serve()
        finally:
            thread.join()
            _active.reset(token)
        return outcome.result()

    def in_agent(self, *args: Any) -> Any:
        """Run the job of the request being served in its own task on the agent's loop (a
        tool's body, between the call's intent and its outcome), and return what it returns."""
        request = self._serving
        if request is None or request.job is None:
            raise NotInStage("a tool of a ResumerAgent is called by the agent's run alone")
        answer: concurrent.futures.Future = concurrent.futures.Future()
        request.loop.call_soon_threadsafe(request.inbox.put_nowait, (_RUN, (args, answer)))
        return answer.result()

    def _serve(self) -> None:
        while (request := self._requests.get()) is not _FINISHED:
            self._serving = request
            try:
                result = request.work()
            except BaseException:
                self._abandon()
                raise
            finally:
                self._serving = None
            request.loop.call_soon_threadsafe(request.inbox.put_nowait, (_DONE, result))

    def _abandon(self) -> None:
        """The stage stops here: cancel the agent's run and wait for its thread to end (a
        request it still makes meanwhile is told to stop, never served)."""
        self._loop.call_soon_threadsafe(self._task.cancel)
        while (request := self._requests.get()) is not _FINISHED:
            request.loop.call_soon_threadsafe(request.inbox.put_nowait, (_STOP, None))

    # --- the agent's thread ----------------------------------------------------------------

    def _drive(
        self, main: Callable[[], Awaitable[Any]], outcome: concurrent.futures.Future
    ) -> None:
        try:
            outcome.set_result(asyncio.run(self._main(main)))
        except BaseException as exc:  # handed to the stage thread, which raises it
            outcome.set_exception(exc)
        finally:
            self._requests.put(_FINISHED)

    async def _main(self, main: Callable[[], Awaitable[Any]]) -> Any:
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        _active.set(self)
        return await main()

    async def durable(
        self, work: Callable[[], Any], job: Callable[..., Awaitable[Any]] | None = None
    ) -> Any:
        """Have the stage thread do `work` (a ctx.call) and return its result; while it does,
        run `job` here whenever the call is made (the tool's body, `in_agent`)."""
        inbox: asyncio.Queue = asyncio.Queue()
        self._requests.put(_Request(work, asyncio.get_running_loop(), inbox, job))
        while True:
            kind, value = await inbox.get()
            if kind == _DONE:
                return value
            if kind == _STOP:
                raise asyncio.CancelledError
            args, answer = value
            try:
                answer.set_result(await job(*args))
            except BaseException as exc:  # the stage thread waits on it: never leave it waiting
                answer.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise

"""What a tool's call can come to besides a result: refused by its target (nothing happened
there), a key the target holds for another request, rejected by a human, or an outcome
nobody knows. Tools raise these; the durable call records each as what it is (pipelines
import them from runs.pipeline)."""

from __future__ import annotations

__all__ = ["CallRejected", "KeyConflict", "OutcomeUnknown", "ToolRejected", "timed_out"]


class ToolRejected(Exception):
    """The target answered and refused: nothing happened there, a new attempt is safe."""


class KeyConflict(ToolRejected):
    """The target refused this delivery key for a different request (HTTP 409 and the like):
    nothing happened, and the same key would get the same answer. The run stops with it, and
    a resume of the effect waits for a human."""


class CallRejected(ToolRejected):
    """A human rejected a call that required their confirmation: it was not made. Raised by
    ctx.call into the stage, which may go on without it; unhandled, the stage fails with the
    reason."""

    def __init__(self, message: str, *, reason: str = "", by: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.by = by


class OutcomeUnknown(Exception):
    """An external call neither confirmed nor refused (a time-out, a dropped connection): the
    engine records the effect's outcome as unknown and never guesses. `timed_out=True` says
    the answer did not come in the time allowed; the run's FAILED records it (timed_out())."""

    def __init__(self, *args: object, timed_out: bool = False) -> None:
        super().__init__(*args)
        self.timed_out = timed_out


def timed_out(exc: BaseException) -> bool:
    """Whether a call's failure was a time-out: an error that says so (OutcomeUnknown and the
    HTTP tool's TargetUnavailable carry `timed_out`), or a TimeoutError (a socket's, which
    libraries such as requests keep as the cause of their own)."""
    seen: BaseException | None = exc
    for _ in range(10):  # a cause chain is short; a cycle must not hang the engine
        if seen is None:
            return False
        if isinstance(seen, TimeoutError) or getattr(seen, "timed_out", False) is True:
            return True
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return False

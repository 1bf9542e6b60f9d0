"""What can go wrong in an HTTP tool's call or lookup. Each error carries the exchanges the
tool saw, so the event that records the failure shows what the target answered."""

from __future__ import annotations

from collections.abc import Sequence

from runs import pipeline
from runs.ledger.exchanges import Exchange


class HttpToolError(Exception):
    """Base of the HTTP tools' errors; `exchanges` holds what the tool saw."""

    def __init__(self, message: str, *, exchanges: Sequence[Exchange] = ()) -> None:
        super().__init__(message)
        self.exchanges = tuple(exchanges)


class TargetUnavailable(HttpToolError):
    """The outcome is unknown: a 5xx, a time-out, a dropped or refused connection, or a 2xx
    whose body could not be read. `sent` is False only when no connection was ever made (the
    request cannot have arrived); `status` is the last status seen, if any; `timed_out` says
    the last attempt got no answer in the time allowed (pipeline.timed_out())."""

    def __init__(
        self,
        message: str,
        *,
        exchanges: Sequence[Exchange] = (),
        sent: bool = True,
        status: int | None = None,
        timed_out: bool = False,
    ) -> None:
        super().__init__(message, exchanges=exchanges)
        self.sent = sent
        self.status = status
        self.timed_out = timed_out


class HttpRejected(pipeline.ToolRejected, HttpToolError):
    """The target answered with a 4xx: it refused the request, nothing happened there."""

    def __init__(self, message: str, *, exchanges: Sequence[Exchange] = (), status: int) -> None:
        super().__init__(message, exchanges=exchanges)
        self.status = status


class KeyConflict(pipeline.KeyConflict, HttpToolError):
    """409: the target already holds a different request under this idempotency key. The
    pipeline API's KeyConflict, with the exchanges that showed it."""


class ReconcileUnavailable(HttpToolError):
    """A reconcile lookup got no usable answer: the effect's outcome is still unknown. Asking
    again later may succeed."""

"""A person's reason, as an event records it: why a supervisor edited the ledger, why an
operator accepted a deviation or closed a run out. Each is read on the run's timeline, so it is
bounded the same way wherever it comes from."""

from __future__ import annotations

# Room to say why, or what was checked; not for a pasted log.
MAX_REASON_CHARS = 2000


def checked_reason(
    reason: str | None, *, missing: str, refused: type[Exception], what: str = "a reason"
) -> str:
    """The reason as it is recorded (its ends trimmed), or `refused` saying what is wrong:
    `missing` when there is none, that `what` is too long otherwise."""
    reason = (reason or "").strip()
    if not reason:
        raise refused(missing)
    if len(reason) > MAX_REASON_CHARS:
        raise refused(f"{what} is limited to {MAX_REASON_CHARS} characters")
    return reason

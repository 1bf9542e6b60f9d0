"""How an HTTP tool retries a transient failure, and which policies may."""

from __future__ import annotations

import random
from dataclasses import dataclass

from runs.models import ReplayPolicy

# The other policies never retry inside a call: a second attempt is exactly what they must
# not do blindly.
RETRYING_POLICIES = frozenset({ReplayPolicy.SAFE, ReplayPolicy.IDEMPOTENT})


@dataclass(frozen=True)
class Retry:
    """How an IDEMPOTENT (or SAFE) tool retries a transient failure, with the same key.
    `attempts` counts the first one; the pause doubles from `backoff` up to `max_backoff`,
    with jitter, or follows the target's Retry-After within the same cap."""

    attempts: int = 3
    backoff: float = 0.2
    max_backoff: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("Retry needs attempts >= 1 and non-negative pauses")

    def pause(self, retry: int, retry_after: str | None = None) -> float:
        hinted = _retry_after_seconds(retry_after)
        if hinted is not None:
            return min(self.max_backoff, hinted)
        wait = min(self.max_backoff, self.backoff * 2 ** (retry - 1))
        return wait * random.uniform(0.5, 1.0)


def _retry_after_seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: use our own backoff

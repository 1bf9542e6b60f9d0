"""Test pipelines registered beside the configured ones, for one test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from runs.pipeline import registry


@contextmanager
def registered(settings, *paths: str) -> Iterator[None]:
    """Add the pipelines at these dotted paths to RESUMER_PIPELINES (pytest-django's
    `settings` restores it) and make the registry load again, on entry and on exit: it caches
    what it loaded."""
    settings.RESUMER_PIPELINES = [*settings.RESUMER_PIPELINES, *paths]
    registry._pipelines = None
    try:
        yield
    finally:
        registry._pipelines = None

"""System checks for Resumer's own settings."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register


@register(Tags.security)
def chain_key_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """In production the run heads must be anchored: without the key, anyone who can write to
    the database can rewrite a run's history end to end and verify_chain still passes."""
    if not settings.PRODUCTION or settings.RESUMER_CHAIN_KEY:
        return []
    return [
        Warning(
            "RESUMER_CHAIN_KEY is not set: run heads are not anchored, so a history rewritten "
            "in the database (every hash recomputed) passes verify_chain.",
            hint="Set RESUMER_CHAIN_KEY to a long random secret kept outside the database, "
            "the same on every web and worker process.",
            id="runs.W001",
        )
    ]

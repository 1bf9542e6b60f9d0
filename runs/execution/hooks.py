"""Call hooks: code a deployment runs around every tool call a stage makes.

The engine calls `before_ask` right before a gate opens and `after_answer` when a stage that
runs again finds a gate's recorded answer (runs/execution/asking.py). It calls `before_call` once the call's intent is recorded and before the call is
made, and `after_call` once the call returned and before its result is recorded. Whatever
`after_call` raises counts as the call's own failure: for an effect, the engine records its
outcome as unknown (raise `runs.pipeline.OutcomeUnknown` for "the answer never arrived").

The hooks are handed to `engine.execute(..., hooks=...)`, the way Django hands a
`progress_callback` to its migration executor; the RQ job passes the installed ones, named by
the dotted path in `settings.RESUMER_CALL_HOOKS` (empty: these no-op hooks). The demo's fault
injection (`demo.faults.FaultHooks`) is such a set of hooks; the core has no faults of its own.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from runs.pipeline import Context


class CallHooks:
    """Does nothing. Subclass it and override either method."""

    def before_call(self, ctx: Context, call_id: str) -> None:
        pass

    def after_call(self, ctx: Context, call_id: str, result: Any) -> None:
        pass

    def before_ask(self, ctx: Context, gate_id: str) -> None:
        """Before a gate opens (GATE_OPENED not written yet)."""

    def after_answer(self, ctx: Context, gate_id: str, answer: dict[str, Any]) -> None:
        """A stage that runs again found the gate's recorded answer, before it acts on it."""


def installed() -> CallHooks:
    """A fresh instance of the hooks settings.RESUMER_CALL_HOOKS names (one per stage job, so
    an instance may cache what it looked up for its run)."""
    path = getattr(settings, "RESUMER_CALL_HOOKS", "")
    return import_string(path)() if path else CallHooks()

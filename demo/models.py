"""The demo's in-process outside world (the search source and the language model) and the
faults injected into runs. The renderer, the asset store, the platform and the card processor
are the demo service (demo_service/), with a database of its own.

None of these tables is part of the run ledger. Resumer only reaches the search source and the
model through the SAFE tools in demo/pipeline.py; every request either receives is metered in
SimCall, so a test can count calls.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class SimCall(models.Model):
    """The meter of the in-process systems: one row per search or model call."""

    system = models.CharField(max_length=32)
    operation = models.CharField(max_length=32)
    key = models.CharField(max_length=64, blank=True)
    billed = models.BooleanField(default=False)
    cost = models.DecimalField(max_digits=10, decimal_places=4, default=0)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # Meter read-outs: calls per system and operation.
            models.Index(fields=["system", "operation"], name="simcall_system_idx"),
        ]


class FactSheet(models.Model):
    """The search source: facts per topic, versioned. A new version can appear at any time."""

    topic = models.CharField(max_length=200)
    version = models.PositiveIntegerField()
    facts = models.JSONField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # Lookup of topic@vN and "latest version of a topic".
            models.UniqueConstraint(fields=["topic", "version"], name="factsheet_topic_version"),
        ]


class RunFaults(models.Model):
    """What demo/faults.py injects into one run: the demo's own table, keyed by the run, so
    the run ledger carries no demo knobs. Crash and timeout points fire on the run's first
    attempt only, so the approved resume gets through."""

    run = models.OneToOneField(
        "runs.Run", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    # "stage/call/before|after": the worker dies by SIGKILL there.
    crash = models.CharField(max_length=200, blank=True)
    # "stage/call/after": the call happens, its answer never arrives.
    timeout = models.CharField(max_length=200, blank=True)
    # {"stage/call": seconds}: sleep before that call (after its intent is recorded).
    stall = models.JSONField(default=dict, blank=True)
    # Seconds before every call, to watch a run live.
    delay = models.FloatField(default=0)
    # {"stage/call": "drop"|"late"|"5xx"|"down"}: the demo service fails that call's request.
    network = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name_plural = "run faults"

    def __str__(self) -> str:
        return f"faults of run-{self.run_id}"

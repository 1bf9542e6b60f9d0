"""The demo's outside world: simulated external systems with their own state.

None of these tables is part of the run ledger. Resumer only reaches them through the tools in
demo/pipeline.py, and reconcile asks them questions exactly as it would ask a real platform.
Every request any of them receives is metered in SimCall, so a test can count calls.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class SimCall(models.Model):
    """The meter: one row per request an external system received."""

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


class Render(models.Model):
    """The image renderer: each row is one billed render. Idempotent by key."""

    key = models.CharField(max_length=64, unique=True)
    prompt = models.TextField()
    svg = models.TextField()
    sha256 = models.CharField(max_length=64)
    cost = models.DecimalField(max_digits=10, decimal_places=4)
    created_at = models.DateTimeField(db_default=Now())


class Asset(models.Model):
    """The asset store: uploads are idempotent by key."""

    key = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    sha256 = models.CharField(max_length=64)
    size = models.PositiveIntegerField()
    created_at = models.DateTimeField(db_default=Now())

    @property
    def url(self) -> str:
        return f"https://assets.example/{self.sha256[:16]}/{self.name}.svg"


class Article(models.Model):
    """The publishing platform. Like most real ones it does NOT deduplicate publishes: two
    calls make two articles. That is why publish is RECONCILE_FIRST."""

    account = models.CharField(max_length=64)
    platform = models.CharField(max_length=64)
    delivery_key = models.CharField(max_length=64)
    title = models.CharField(max_length=300)
    body = models.TextField()
    content_hash = models.CharField(max_length=64)
    cover_url = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # Reconcile: "is there an article with this delivery key / content hash?"
            models.Index(fields=["account", "platform", "delivery_key"], name="article_key_idx"),
            models.Index(fields=["account", "platform", "content_hash"], name="article_hash_idx"),
        ]

    @property
    def external_id(self) -> str:
        return f"art-{self.pk}"


class Charge(models.Model):
    """The card processor: every call charges. Never re-run automatically."""

    account = models.CharField(max_length=64)
    reference = models.CharField(max_length=64)
    amount = models.DecimalField(max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(db_default=Now())

    @property
    def external_id(self) -> str:
        return f"ch-{self.pk}"


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

    class Meta:
        verbose_name_plural = "run faults"

    def __str__(self) -> str:
        return f"faults of run-{self.run_id}"

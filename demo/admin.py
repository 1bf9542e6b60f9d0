"""The demo's in-process outside world, read-only: the search source's facts and the meter of
the search and model calls. Also the faults injected into each run. What the renderer, the
asset store, the platform and the card processor hold is the demo service's: a supervisor
asks it (GET /v1/charges/by-key/<delivery key>) before correcting the effect ledger."""

from __future__ import annotations

from django.contrib import admin

from demo.models import FactSheet, RunFaults, SimCall
from runs.admin import ReadOnlyAdmin, RunRowAdmin, RunSearchMixin


@admin.register(SimCall)
class SimCallAdmin(ReadOnlyAdmin):
    list_display = ["id", "system", "operation", "key", "billed", "cost", "created_at"]
    list_filter = ["system", "operation", "billed"]
    search_fields = ["=key"]
    ordering = ["-id"]


@admin.register(FactSheet)
class FactSheetAdmin(ReadOnlyAdmin):
    list_display = ["topic", "version", "created_at"]
    search_fields = ["topic"]
    ordering = ["topic", "-version"]


@admin.register(RunFaults)
class RunFaultsAdmin(RunSearchMixin, RunRowAdmin):
    list_display = ["run_link", "crash", "timeout", "stall", "delay", "network"]
    search_fields = ["=run__id"]
    ordering = ["-run_id"]

"""The demo's simulated outside world, read-only: what the renderer, the asset store, the
platform and the card processor received. A supervisor checks here before correcting the
effect ledger ("was the card really charged?"). Also the faults injected into each run."""

from __future__ import annotations

from django.contrib import admin

from demo.models import Article, Asset, Charge, FactSheet, Render, RunFaults, SimCall
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


@admin.register(Render)
class RenderAdmin(ReadOnlyAdmin):
    list_display = ["id", "key", "prompt", "cost", "created_at"]
    search_fields = ["=key"]
    ordering = ["-id"]


@admin.register(Asset)
class AssetAdmin(ReadOnlyAdmin):
    list_display = ["id", "name", "key", "sha256", "size", "created_at"]
    search_fields = ["=key", "name"]
    ordering = ["-id"]


@admin.register(Article)
class ArticleAdmin(ReadOnlyAdmin):
    list_display = ["external_id", "account", "platform", "title", "delivery_key", "created_at"]
    list_filter = ["account", "platform"]
    search_fields = ["=delivery_key", "=content_hash"]
    ordering = ["-id"]


@admin.register(Charge)
class ChargeAdmin(ReadOnlyAdmin):
    list_display = ["external_id", "account", "reference", "amount", "created_at"]
    list_filter = ["account"]
    search_fields = ["=reference"]
    ordering = ["-id"]


@admin.register(RunFaults)
class RunFaultsAdmin(RunSearchMixin, RunRowAdmin):
    list_display = ["run_link", "crash", "timeout", "stall", "delay"]
    search_fields = ["=run__id"]
    ordering = ["-run_id"]

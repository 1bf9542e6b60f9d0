"""The admin: a read-only window on the run ledger, and the one place a supervisor corrects the
effect ledger.

Runs, events, checkpoints, artifacts and leases only ever change through the append path
(runs/ledger/append.py), so here they can be looked at, never added, changed or deleted. An effect
can be changed by a supervisor, and the change goes through edits.edit_effect(): a reason is
required and a LEDGER_EDITED event records who changed what. Access follows the dashboard's
roles (runs/access/roles.py), not model permissions: any staff user with a role may look, only a
supervisor may edit the ledger. Notifications and their delivery log are for supervisors
only, read-only.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from runs import ids, notify
from runs.access import roles

# API tokens (runs/api/admin.py) register themselves beside the ledger.
from runs.api import admin as api_admin  # noqa: F401
from runs.dashboard.forms import EffectLedgerForm
from runs.ledger.append import LedgerError
from runs.ledger.edits import edit_effect
from runs.models import (
    Artifact,
    Checkpoint,
    Delivery,
    Effect,
    Event,
    Gate,
    GroupApproval,
    Lease,
    Notification,
    NotificationRun,
    Run,
    StageLog,
    StoredPlan,
    SupervisorAsk,
)
from runs.pipeline import registry

admin.site.site_header = "Resumer admin"
admin.site.site_title = "Resumer admin"
admin.site.index_title = "Run ledger and effect ledger"
admin.site.site_url = "/runs/"


class ReadOnlyAdmin(admin.ModelAdmin):
    """Look, never touch: no add, change or delete for anyone, superusers included."""

    # Counting a million events for the paginator on every page is not worth it.
    show_full_result_count = False

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_staff and roles.can_view(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None):
        # A row keyed by its run (a lease, a stored plan) is looked up without the range check
        # Django gives integer keys, and SQLite refuses a number past 64 bits outright: such a
        # number names no row, so the admin answers as for any missing one.
        try:
            return super().get_object(request, object_id, from_field)
        except OverflowError:
            return None


class PipelineFilter(admin.SimpleListFilter):
    """Choices from the pipeline registry: no SELECT DISTINCT over a large table."""

    title = "pipeline"
    parameter_name = "pipeline"

    def lookups(self, request, model_admin):
        return [(name, name) for name in registry.names()]

    def queryset(self, request, queryset):
        return queryset.filter(pipeline=self.value()) if self.value() else queryset


class StageFilter(admin.SimpleListFilter):
    title = "stage"
    parameter_name = "stage"

    def lookups(self, request, model_admin):
        names: list[str] = []
        for pipeline in registry.names():
            names += [s for s in registry.get(pipeline).stage_names if s not in names]
        return [(name, name) for name in names]

    def queryset(self, request, queryset):
        return queryset.filter(stage=self.value()) if self.value() else queryset


class RunStageFilter(StageFilter):
    def queryset(self, request, queryset):
        return queryset.filter(current_stage=self.value()) if self.value() else queryset


def _public_id_search(
    queryset: QuerySet, term: str, field: str = "run_id"
) -> tuple[QuerySet, bool] | None:
    """Search boxes accept run ids as the dashboard prints them ("run-42")."""
    pk = ids.parse_run_id(term)
    return (queryset.filter(**{field: pk}), False) if pk is not None else None


class RunRowAdmin(ReadOnlyAdmin):
    """Rows that belong to one run: shown with the run's public id."""

    @admin.display(description="run", ordering="run_id")
    def run_link(self, obj: Any) -> str:
        return ids.run_id(obj.run_id)


class RunSearchMixin:
    """The search box also takes a run id ("run-42")."""

    def get_search_results(self, request, queryset, search_term):
        found = _public_id_search(queryset, search_term.strip())
        return found or super().get_search_results(request, queryset, search_term)


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = [
        "public_id",
        "pipeline",
        "status",
        "current_stage",
        "attempt",
        "last_seq",
        "parent",
        "updated_at",
    ]
    list_display_links = ["public_id"]
    list_filter = ["status", PipelineFilter, RunStageFilter]
    list_select_related = ["parent"]
    search_fields = ["=id"]
    search_help_text = "Run id, e.g. run-42"
    ordering = ["attention", "severity", "-updated_at", "-id"]

    def view_on_site(self, obj: Run) -> str:
        return reverse("runs:run", args=[obj.pk])

    def get_search_results(self, request, queryset, search_term):
        found = _public_id_search(queryset, search_term.strip(), "pk")
        return found or super().get_search_results(request, queryset, search_term)


@admin.register(Event)
class EventAdmin(RunSearchMixin, RunRowAdmin):
    list_display = ["__str__", "run_link", "seq", "stage", "type", "actor", "key", "created_at"]
    list_filter = ["type", StageFilter]
    search_fields = ["=idempotency_key"]
    search_help_text = "An idempotency (delivery) key, or a run id like run-42"
    ordering = ["-id"]

    @admin.display(description="idempotency key")
    def key(self, obj: Event) -> str:
        return obj.idempotency_key[:16]


@admin.register(Checkpoint)
class CheckpointAdmin(RunSearchMixin, RunRowAdmin):
    list_display = ["id", "run_link", "stage", "last_seq", "next_stage", "created_at"]
    list_filter = [StageFilter]
    search_fields = ["=id"]
    search_help_text = "A checkpoint id (run-42:visual-verified) or a run id (run-42)"
    ordering = ["-created_at"]


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ["uri", "content_type", "size", "sha256", "run", "created_at"]
    search_fields = ["^name", "=sha256"]
    list_select_related = ["run"]
    ordering = ["-id"]

    def view_on_site(self, obj: Artifact) -> str:
        return reverse("runs:artifact", args=[obj.pk])


@admin.register(Lease)
class LeaseAdmin(RunRowAdmin):
    list_display = ["run_link", "holder", "token", "expires_at", "heartbeat_at", "acquired_at"]
    search_fields = ["holder"]
    ordering = ["-run_id"]


@admin.register(StageLog)
class StageLogAdmin(RunSearchMixin, RunRowAdmin):
    """What failed stages logged: operators and up, as on the run page (logs may hold
    what a viewer must not read)."""

    list_display = ["run_link", "stage", "token", "outcome", "worker", "updated_at"]
    search_fields = ["stage"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return super().has_module_permission(request) and roles.can_approve(request.user)


@admin.register(Gate)
class GateAdmin(RunSearchMixin, RunRowAdmin):
    """Gates are read here; they are answered on the dashboard's gate page, never edited: the
    answer is an event in the run's chain."""

    list_display = ["__str__", "run_link", "kind", "role", "status", "answered_by", "created_at"]
    list_filter = ["status", "kind", "role"]
    search_fields = ["=gate_id"]
    search_help_text = "A gate id (review) or a run id like run-42"
    ordering = ["-id"]


@admin.register(StoredPlan)
class StoredPlanAdmin(RunRowAdmin):
    list_display = ["run_link", "fingerprint", "run_version", "blocked", "drifted", "computed_at"]
    list_filter = ["blocked", "drifted"]
    ordering = ["-computed_at"]

    def view_on_site(self, obj: StoredPlan) -> str:
        return reverse("runs:plan", args=[obj.run_id])


class UnsettledRunFilter(admin.SimpleListFilter):
    """Filter effects by run. Offers the runs that still have an unsettled effect (a list of
    every run would be ten thousand links); any run works through ?run=<id>."""

    title = "run"
    parameter_name = "run"

    def lookups(self, request, model_admin):
        pks = (
            Effect.objects.exclude(status__in=Effect.SETTLED)
            .order_by("-run_id")
            .values_list("run_id", flat=True)
            .distinct()[:30]
        )
        return [(str(pk), ids.run_id(pk)) for pk in pks]

    def queryset(self, request, queryset):
        value = self.value() or ""
        pk = ids.parse_run_id(value, bare=True)
        return queryset.filter(run_id=pk) if pk is not None else queryset


# What a supervisor reads but never edits: everything but the outcome.
EFFECT_FACTS = [
    "run",
    "stage",
    "call_id",
    "tool",
    "policy",
    "target",
    "delivery_key",
    "request_hash",
    "request",
    "result",
    "attempts",
    "cost",
    "created_at",
    "updated_at",
]


@admin.register(Effect)
class EffectAdmin(RunRowAdmin):
    form = EffectLedgerForm
    list_display = [
        "__str__",
        "run_link",
        "stage",
        "call_id",
        "policy",
        "status",
        "target",
        "external_id",
        "updated_at",
    ]
    list_filter = ["status", "policy", "target", UnsettledRunFilter]
    search_fields = ["^delivery_key", "=external_id"]
    search_help_text = "A delivery key (or its first characters) or an external id"
    ordering = ["-updated_at", "-id"]
    fieldsets = [
        (
            "Correct the ledger",
            {
                "description": "Say what really happened outside (check with the target "
                "first). Saving appends LEDGER_EDITED to the run's event log with your user "
                "name, the values before and after, and your reason.",
                "fields": ["status", "external_id", "error", "reason"],
            },
        ),
        (
            "The effect",
            {"fields": EFFECT_FACTS},
        ),
    ]
    readonly_fields = EFFECT_FACTS

    def view_on_site(self, obj: Effect) -> str:
        return reverse("runs:run", args=[obj.run_id]) + "#effects"

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return roles.can_edit_ledger(request.user)

    def get_fieldsets(self, request, obj=None):
        if self.has_change_permission(request, obj):
            return self.fieldsets
        # A reader sees the effect; the reason field belongs to an edit only.
        editable = ["status", "external_id", "error"]
        return [(None, {"fields": editable + self.readonly_fields})]

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        # A subclass per request carries the ledger's refusal, without shared mutable state.
        refusal = getattr(request, "ledger_refusal", "")
        return type(form.__name__, (form,), {"refusal": refusal})

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except LedgerError as exc:
            # Some refusals only the ledger can make, at the write. It wrote nothing, and the
            # admin's transaction rolled back its log entry: the same submission is shown
            # again, with the refusal as the form's error.
            request.ledger_refusal = str(exc)
            return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request, obj, form, change) -> None:
        # The edit goes through the ledger, never a plain save (which would bypass the log).
        event = edit_effect(
            obj.pk,
            form.changes(),
            reason=form.cleaned_data["reason"],
            actor=ids.user_actor(request.user),
        )
        messages.info(
            request, f"Recorded as event #{event.seq} (LEDGER_EDITED) of run-{obj.run_id}."
        )


# --- Notifications: supervisors only, read-only ----------------------------------------------


class SupervisorOnlyAdmin(ReadOnlyAdmin):
    """Notification targets (webhook hosts, email addresses) and their failures are the
    operations team's business: only supervisors see them."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and roles.can_read_delivery_log(request.user)


class DeliveryInline(admin.TabularInline):
    model = Delivery
    fields = ["created_at", "channel", "target", "attempt", "ok", "status_code", "error"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["channel", "attempt"]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return roles.can_read_delivery_log(request.user)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Notification)
class NotificationAdmin(SupervisorOnlyAdmin):
    list_display = ["__str__", "state", "run_count", "opened_at", "queued_at", "inbox_link"]
    list_filter = ["state"]
    ordering = ["-opened_at", "-id"]
    inlines = [DeliveryInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).annotate(run_count=Count("runs"))

    @admin.display(description="runs", ordering="run_count")
    def run_count(self, obj: Notification) -> int:
        return obj.run_count  # type: ignore[attr-defined]

    @admin.display(description="inbox")
    def inbox_link(self, obj: Notification) -> str:
        return format_html('<a href="{}">its runs</a>', notify.group_url(obj.pk))

    def view_on_site(self, obj: Notification) -> str:
        return notify.group_url(obj.pk)


@admin.register(NotificationRun)
class NotificationRunAdmin(RunSearchMixin, RunRowAdmin, SupervisorOnlyAdmin):
    list_display = ["__str__", "run_link", "notification", "reason", "seq", "created_at"]
    list_filter = ["reason"]
    ordering = ["-id"]


@admin.register(Delivery)
class DeliveryAdmin(SupervisorOnlyAdmin):
    """The delivery log: one row per attempt to send a notification to one target."""

    list_display = ["notification", *DeliveryInline.fields]
    list_filter = ["channel", "ok"]
    ordering = ["-created_at", "-id"]


# Who asked a supervisor about which effect (runs/asks.py): beside the notifications it joined.
admin.site.register(SupervisorAsk, SupervisorOnlyAdmin)


@admin.register(GroupApproval)
class GroupApprovalAdmin(ReadOnlyAdmin):
    """Bulk approvals run in the background: who approved which group, what was approved and
    skipped (runs/planning/triage.py). Each approved run's PLAN_APPROVED names the batch."""

    list_display = ["id", "group", "action", "actor", "state", "created_at", "updated_at"]
    list_filter = ["state", "action"]
    search_fields = ["=id", "=group", "actor"]
    ordering = ["-created_at"]

    def view_on_site(self, obj: GroupApproval) -> str:
        return reverse("runs:batch", args=[obj.pk])

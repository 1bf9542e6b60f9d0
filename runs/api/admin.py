"""API tokens in the admin (imported by runs/admin.py): supervisors see every token and
revoke tokens, and make none: a token acts as its user, and only that user makes it, on their
own token page (/account/tokens/). A supervisor who could make one for somebody else could act
as them (and cast their vote at a gate that needs two people). A token is never edited or
deleted: a revoked one stays, to say what was used and when."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest

from runs.access import roles
from runs.models import ApiToken, IdempotentRequest


class SupervisorsRead(admin.ModelAdmin):
    """Rows only supervisors read (who manage the queues), and nobody adds or deletes: a
    token only its user makes (the token page, a superuser included), a request's key only
    the API records."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and roles.can_manage_queues(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(SupervisorsRead):
    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "=prefix", "user__username"]
    list_select_related = ["user"]
    readonly_fields = ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Only the revoke action changes a token; its form stays read-only.
        return obj is None and self.has_module_permission(request)

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=Now())
        messages.success(request, f"{count} token{'s' if count != 1 else ''} revoked.")


@admin.register(IdempotentRequest)
class IdempotentRequestAdmin(SupervisorsRead):
    """The API's idempotency keys and the responses they answer with: supervisors read them
    (what a client retried, and what it was told); nobody edits one."""

    list_display = ["key", "user", "status", "created_at"]
    list_select_related = ["user"]
    search_fields = ["=key", "user__username"]
    readonly_fields = ["user", "key", "request_hash", "status", "response", "created_at"]

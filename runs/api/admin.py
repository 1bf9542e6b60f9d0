"""API tokens in the admin (imported by runs/admin.py): supervisors see every token, make
one for a user (its secret shown once, in the message that follows) and revoke tokens. A
token is never edited or deleted: a revoked one stays, to say what was used and when."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest

from runs.api import tokens
from runs.dashboard import roles
from runs.models import ApiToken, IdempotentRequest


class ApiTokenAddForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ["user", "name"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "=prefix", "user__username"]
    list_select_related = ["user"]
    readonly_fields = ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and roles.can_manage_queues(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_module_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Only the revoke action changes a token; its form stays read-only.
        return obj is None and self.has_module_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any):
        if obj is None:
            kwargs["form"] = ApiTokenAddForm
            kwargs["fields"] = ["user", "name"]
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.readonly_fields if obj is not None else []

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"user": request.user.pk}

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user":
            kwargs["queryset"] = get_user_model().objects.filter(is_active=True)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: ApiToken, form, change: bool) -> None:
        if change:
            return
        token, secret = tokens.issue(obj.user, obj.name)
        obj.pk, obj.prefix, obj.secret_hash = token.pk, token.prefix, token.secret_hash
        messages.warning(
            request, f"The token for {obj.user}: {secret} — copy it now, it is not shown again."
        )

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=Now())
        messages.success(request, f"{count} token{'s' if count != 1 else ''} revoked.")


@admin.register(IdempotentRequest)
class IdempotentRequestAdmin(admin.ModelAdmin):
    """The API's idempotency keys and the responses they answer with: supervisors read them
    (what a client retried, and what it was told); nobody edits one."""

    list_display = ["key", "user", "status", "created_at"]
    list_select_related = ["user"]
    search_fields = ["=key", "user__username"]
    readonly_fields = ["user", "key", "request_hash", "status", "response", "created_at"]

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

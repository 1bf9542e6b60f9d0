"""The one filter that marks text safe: `markdown`, which renders a gate's context and
sanitises it first (runs/dashboard/rich_text.py). Every other helper leaves escaping on."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString, mark_safe

from runs.dashboard import rich_text

register = template.Library()


@register.filter
def markdown(text: str) -> SafeString:
    # Safe: rendered and sanitised against an allow-list just before.
    return mark_safe(rich_text.render(str(text or "")))

"""{% conversation run %}: the run page's "Conversation — context, not evidence" section."""

from __future__ import annotations

from typing import Any

from django import template

from runs.reads.conversation import conversations

register = template.Library()


@register.inclusion_tag("runs/_conversation.html")
def conversation(run: Any) -> dict[str, Any]:
    return {"conversations": conversations(run)}

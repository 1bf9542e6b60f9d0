"""The effect ledger's writes: an effect's intent before its external call, its outcome after,
and what a target said it found. Each goes with its event in one transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from runs.append import Writer, append
from runs.models import Effect, Event
from runs.pipeline import Reconciliation

__all__ = ["MorePayload", "record_found", "record_intent", "record_outcome", "with_more"]


# more_payload(): payload fields built inside the event's transaction, because building them
# may write artifact rows (an HTTP tool's large bodies), which must commit with the fenced
# append or not at all.
MorePayload = Callable[[], dict[str, Any]] | None


def with_more(payload: dict, more_payload: MorePayload) -> dict:
    return {**payload, **more_payload()} if more_payload is not None else payload


def record_intent(
    writer: Writer,
    effect_fields: dict[str, Any],
    *,
    event_payload: dict,
    more_payload: MorePayload = None,
) -> Effect:
    """Commit the effect intent (and its TOOL_CALLED event) before the external call.

    An existing effect with the same delivery key is reused: its attempts go up, and the
    caller decides from its status whether the call may happen at all."""
    with transaction.atomic():
        event = append(
            writer,
            Event.Type.TOOL_CALLED,
            stage=effect_fields["stage"],
            payload=with_more(event_payload, more_payload),
            idempotency_key=effect_fields["delivery_key"],
        )
        effect = (
            Effect.objects.select_for_update()
            .filter(delivery_key=effect_fields["delivery_key"])
            .first()
        )
        if effect is None:
            effect = Effect.objects.create(**effect_fields, attempts=1, status=Effect.Status.INTENT)
        else:
            # Back to intent before the new attempt: if this attempt dies, nobody may read an
            # earlier "failed" as "nothing happened".
            Effect.objects.filter(pk=effect.pk).update(
                attempts=F("attempts") + 1, status=Effect.Status.INTENT, error="", updated_at=Now()
            )
            effect.refresh_from_db()
        effect._called_event = event  # type: ignore[attr-defined]
        return effect


def record_outcome(
    writer: Writer,
    effect: Effect,
    *,
    status: str,
    external_id: str = "",
    result: Any = None,
    error: str = "",
    cost: Any = 0,
    event_type: str = Event.Type.TOOL_RESULT,
    event_payload: dict | None = None,
    run_status: str | None = None,
    more_payload: MorePayload = None,
) -> Event:
    """Write back what the call produced (or what is known of it) with its event."""
    with transaction.atomic():
        event = append(
            writer,
            event_type,
            stage=effect.stage,
            payload=with_more(
                event_payload
                or {
                    "call": effect.call_id,
                    "tool": effect.tool,
                    "status": status,
                    "external_id": external_id,
                    "error": error,
                },
                more_payload,
            ),
            idempotency_key=effect.delivery_key,
            status=run_status,
        )
        Effect.objects.filter(pk=effect.pk).update(
            status=status,
            external_id=external_id,
            result=result,
            error=error,
            cost=cost,
            updated_at=Now(),
        )
        return event


def record_found(
    writer: Writer, effect: Effect, answer: Reconciliation, *, more_payload: MorePayload = None
) -> Event:
    """The target says the effect happened and matches: confirm it with a RECONCILED event
    (the engine on its own re-check, or an approval writing down what the plan showed)."""
    return record_outcome(
        writer,
        effect,
        status=Effect.Status.CONFIRMED,
        external_id=answer.external_id,
        result=answer.result,
        cost=effect.cost,
        event_type=Event.Type.RECONCILED,
        event_payload={
            "call": effect.call_id,
            "tool": effect.tool,
            "found": True,
            "external_id": answer.external_id,
            "detail": answer.detail,
        },
        more_payload=more_payload,
    )

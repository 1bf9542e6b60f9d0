"""The effect ledger's writes: an effect's intent before its external call, its outcome after,
and what a target said it found. Each is written with its event by the one append path, in
one transaction (on PostgreSQL, in the event's own statement: runs/ledger/sql/)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import F
from django.db.models.functions import Now

from runs.events import Reconciled, RunEvent, ToolCalled, effect_names
from runs.ledger.append import KeyTaken, RunMove, Writer, append, deferred_commit
from runs.ledger.maintenance import ledger_writes
from runs.ledger.sql import for_connection
from runs.ledger.sql.shapes import EffectClaim, EffectSettle
from runs.models import Effect, Event
from runs.pipeline import Reconciliation

__all__ = [
    "Intent",
    "MorePayload",
    "claim_intent",
    "find",
    "record_found",
    "record_intent",
    "record_outcome",
    "with_more",
]


# more_payload(): fields of the event built inside its transaction, because building them
# may write artifact rows (an HTTP tool's large bodies), which must commit with the fenced
# append or not at all.
MorePayload = Callable[[], dict[str, Any]] | None


def with_more(event: RunEvent, more_payload: MorePayload) -> RunEvent:
    return replace(event, **more_payload()) if more_payload is not None else event


@dataclass(frozen=True, slots=True)
class Intent:
    """An effect whose intent this process just wrote: what its outcome's write needs (an
    Effect row has the same attributes), without loading or building the model."""

    pk: int
    delivery_key: str
    stage: str
    call_id: str
    tool: str
    cost: Decimal = Decimal(0)


def find(key: str) -> Effect | None:
    """The effect holding delivery key `key`, if any: the read every replay decision starts
    from, run once per call that is not a first attempt."""
    connection = connections[DEFAULT_DB_ALIAS]
    sql = for_connection(connection)
    with sql.cursor(connection) as cursor:
        return sql.read_effect(cursor, connection, key)


def claim_intent(writer: Writer, effect_fields: dict[str, Any], *, event: ToolCalled) -> Intent | None:  # fmt: skip
    """A first attempt's intent in one write: the effect row claims its delivery key with its
    TOOL_CALLED `event`, or, when the key has an effect already, nothing is written and None
    returned (the caller reads that effect and decides: runs/planning/replay.py). No read
    before it: on a key nobody used, the decision is always to call."""
    fields = {
        **{k: v for k, v in effect_fields.items() if k != "run"},
        "run_id": effect_fields["run"].pk,
        "policy": str(effect_fields["policy"]),
        "status": str(Effect.Status.INTENT),
        "external_id": "",
        "result": None,
        "error": "",
        "attempts": 1,
        "cost": 0,
    }
    try:
        written = append(writer, event, effect=EffectClaim(fields))
    except KeyTaken:
        return None
    return Intent(
        written.effect_pk,
        fields["delivery_key"],
        fields["stage"],
        fields["call_id"],
        fields["tool"],
    )


def record_intent(
    writer: Writer,
    effect_fields: dict[str, Any],
    *,
    event: ToolCalled,
    more_payload: MorePayload = None,
) -> Effect:
    """Commit the effect intent (and its TOOL_CALLED `event`) before the external call.

    An existing effect with the same delivery key is reused: its attempts go up, and the
    caller decides from its status whether the call may happen at all."""
    with transaction.atomic():
        called = append(writer, with_more(event, more_payload))
        effect = (
            Effect.objects.select_for_update()
            .filter(delivery_key=effect_fields["delivery_key"])
            .first()
        )
        with ledger_writes():
            if effect is None:
                effect = Effect.objects.create(
                    **effect_fields, attempts=1, status=Effect.Status.INTENT
                )
            else:
                # Back to intent before the new attempt: if this attempt dies, nobody may
                # read an earlier "failed" as "nothing happened".
                Effect.objects.filter(pk=effect.pk).update(
                    attempts=F("attempts") + 1,
                    status=Effect.Status.INTENT,
                    error="",
                    updated_at=Now(),
                )
                effect.refresh_from_db()
        effect._called_event = called  # type: ignore[attr-defined]
        return effect


def record_outcome(
    writer: Writer,
    effect: Effect | Intent,
    event: RunEvent,
    *,
    status: str,
    external_id: str = "",
    result: Any = None,
    error: str = "",
    cost: Any = 0,
    move: RunMove | None = None,
    more_payload: MorePayload = None,
    flush: bool = True,
    wait: bool = True,
) -> Event | None:
    """Write back what the call produced (or what is known of it) on the effect row, with
    `event` (its TOOL_RESULT, FAILED or RECONCILED), in one write. A transaction only when
    more_payload may write artifact rows beside it. `flush` as in append(): False only for
    an outcome whose loss leaves the effect in doubt, which its durable intent already lets
    reconcile resolve; said of that transaction too (deferred_commit()), since losing the
    exchanges with it leaves the same doubt. `wait` as in append() too: False, and without
    more_payload, it may be sent without waiting for its answer (None returned)."""
    settle = EffectSettle(
        effect.pk,
        {
            "status": status,
            "external_id": external_id,
            "result": result,
            "error": error,
            "cost": cost,
        },
    )
    with deferred_commit(flush) if more_payload is not None else nullcontext():
        return append(
            writer,
            with_more(event, more_payload),
            move=move,
            effect=settle,
            flush=flush,
            wait=wait,
        )


def record_found(
    writer: Writer, effect: Effect, answer: Reconciliation, *, more_payload: MorePayload = None
) -> Event:
    """The target says the effect happened and matches: confirm it with a RECONCILED event
    (the engine on its own re-check, or an approval writing down what the plan showed)."""
    return record_outcome(
        writer,
        effect,
        Reconciled(
            **effect_names(effect),
            found=True,
            external_id=answer.external_id,
            detail=answer.detail,
        ),
        status=Effect.Status.CONFIRMED,
        external_id=answer.external_id,
        result=answer.result,
        cost=effect.cost,
        more_payload=more_payload,
    )

"""Derived state checked against the log: the effect rows and the checkpoint rows say what
the events say, or the difference is reported.

The events are the record; an effect row is what its events, folded in order, leave behind
(its status, external id and request hash), and a checkpoint row names its VERIFIED event's
stage, next stage and seq. A row changed with plain SQL (a forged "confirmed as ch-forged",
a checkpoint whose next stage skips four stages) no longer agrees with its events, and
`verify_chain` and the planner both say so through the functions here (one fold, one
comparison), never trusting the row.

    TOOL_CALLED ........................... intent; the request hash of its tool and args
    TOOL_RESULT / FAILED with a status .... that status, with its external id
    RECONCILED ............................ confirmed, with what the target holds
    LEDGER_EDITED ......................... the edit's "after"
    anything else with the key ............ no change (a re-use, a skip, a stop, a question)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from runs.events import (
    LedgerEdited,
    Reconciled,
    RunEvent,
    ToolCalled,
    ToolResult,
    Unreadable,
    Verified,
    read,
)
from runs.ledger.chain import digest
from runs.models import Checkpoint, Effect, Event

# Read whole when stored as an artifact: the request's arguments, the edit's whole "after"
# (a summary keeps neither).
WHOLE = frozenset({Event.Type.TOOL_CALLED, Event.Type.LEDGER_EDITED})


@dataclass
class Derived:
    """What an effect's events say it is."""

    status: str = ""
    external_id: str = ""
    request_hash: str = ""
    # Where its last change was recorded.
    run_id: int = 0
    seq: int = 0
    # Who made that change when it was a supervisor's ledger edit; "" when the engine
    # recorded it (a "failed" is then the target's own refusal).
    edited_by: str = ""


def _said(event: Event) -> RunEvent:
    """The event as its class, read whole where the fold needs what a summary leaves out
    (the summary when the artifact is gone)."""
    if event.type in WHOLE:
        try:
            return read(event, whole=True)
        except Unreadable:
            pass
    return read(event)


def _changes(said: RunEvent) -> dict[str, str] | None:
    if isinstance(said, ToolCalled):
        changes = {"status": Effect.Status.INTENT}
        if said.tool and said.args is not None:
            changes["request_hash"] = digest({"tool": said.tool, "args": said.args})
        return changes
    if said.type in (Event.Type.TOOL_RESULT, Event.Type.FAILED) and said.status:
        if isinstance(said, ToolResult):
            if said.reused or said.skipped:
                return None
            return {"status": said.status, "external_id": said.external_id or ""}
        return {"status": said.status, "external_id": ""}
    if isinstance(said, Reconciled) and said.found:
        return {"status": Effect.Status.CONFIRMED, "external_id": said.external_id}
    if isinstance(said, LedgerEdited) and isinstance(said.after, dict):
        after = said.after
        return {"status": after["status"], "external_id": after.get("external_id", "")}
    return None


def fold(events: Iterable[Event]) -> dict[str, Derived]:
    """Delivery key -> what its events say, folding `events` in the order given (the order
    they were written: by id across runs, by seq within one)."""
    derived: dict[str, Derived] = {}
    for event in events:
        if not event.idempotency_key:
            continue
        said = _said(event)
        changes = _changes(said)
        if changes is None:
            continue
        state = derived.setdefault(event.idempotency_key, Derived())
        if changes.get("status") == Effect.Status.INTENT and state.request_hash:
            changes.pop("request_hash", None)  # a retry keeps the first request's hash
        for name, value in changes.items():
            setattr(state, name, value)
        state.run_id, state.seq = event.run_id, event.seq
        state.edited_by = str(said.by or event.actor) if isinstance(said, LedgerEdited) else ""
    return derived


def effect_disagreement(effect: Effect, derived: Derived | None) -> str:
    """Why the effect row is not what its events say ("" when it is)."""
    where = f"{effect.stage}/{effect.call_id}"
    if derived is None:
        return f"the effect ledger row for {where} has no event that wrote it"
    differs = [
        f"{name} {getattr(effect, name)!r} where its events say {getattr(derived, name)!r}"
        for name in ("status", "external_id", "request_hash")
        if getattr(derived, name) or name != "request_hash"
        if str(getattr(effect, name)) != str(getattr(derived, name))
    ]
    if not differs:
        return ""
    return f"the effect ledger row for {where} disagrees with its events: " + "; ".join(differs)


def effect_events(run_ids: Iterable[int], keys: Iterable[str], *, after_seq: int = 0):
    """The events of these runs that carry one of these delivery keys, in write order."""
    return (
        Event.objects.filter(run_id__in=list(run_ids), idempotency_key__in=list(keys))
        .filter(seq__gt=after_seq)
        .order_by("id")
    )


def said_of(run_ids: Iterable[int], effects: Iterable[Effect], *, after_seq: int = 0):
    """What the events of these runs say of these effect rows: delivery key -> Derived."""
    keys = [e.delivery_key for e in effects]
    if not keys:
        return {}
    return fold(effect_events(run_ids, keys, after_seq=after_seq))


def edited_by(effect: Effect) -> str:
    """Who recorded the effect's state when a supervisor's ledger edit did; "" when the engine
    did (a "failed" is then the target's own refusal). Read from its own run's events."""
    said = said_of([effect.run_id], [effect]).get(effect.delivery_key)
    return said.edited_by if said is not None else ""


def checkpoint_disagreement(checkpoint: Checkpoint, verified: Event | None) -> str:
    """Why the checkpoint row does not name what its VERIFIED event recorded ("" when it
    does): its stage, its next stage and the seq it seals drive the plan."""
    if verified is None or verified.type != Event.Type.VERIFIED:
        return ""  # manifest_ok says that the VERIFIED event is missing
    try:
        said: Verified | None = read(verified, whole=True)
    except Unreadable:
        said = None  # manifest_ok says that its payload cannot be read
    differs = []
    if checkpoint.stage != verified.stage:
        differs.append(f"stage {checkpoint.stage!r} where its VERIFIED says {verified.stage!r}")
    if said is not None and checkpoint.next_stage != said.next_stage:
        differs.append(
            f"next stage {checkpoint.next_stage!r} where its VERIFIED says {said.next_stage!r}"
        )
    if not differs:
        return ""
    return (
        f"the checkpoint row disagrees with its VERIFIED event (seq {verified.seq}): "
        + "; ".join(differs)
    )

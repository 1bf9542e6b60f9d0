"""Supervisor edits of the effect ledger: a correction is never silent."""

from __future__ import annotations

from typing import Any

from django.db.models.functions import Now

from runs.events import LedgerEdited, TargetAsked, effect_names, read, where
from runs.ledger import leases
from runs.ledger.append import LedgerError, Writer, announce_stop, append
from runs.ledger.maintenance import ledger_writes
from runs.ledger.reasons import checked_reason
from runs.models import Effect, Event, Run

__all__ = ["EDITABLE_EFFECT_FIELDS", "EDIT_LEASE_WAIT", "edit_effect"]

EDITABLE_EFFECT_FIELDS = ("status", "external_id", "error")
# What a supervisor may resolve an effect as: it happened (confirmed, with its external id),
# it did not (failed: a new attempt is safe), or it is not to happen (abandoned). Moving one
# back into doubt would only make the next plan ask again what a human already checked.
RESOLVED_BY_EDIT = (Effect.Status.CONFIRMED, Effect.Status.FAILED, Effect.Status.ABANDONED)
ENGINE_ONLY_STATUSES = frozenset(Effect.Status.values) - set(RESOLVED_BY_EDIT)
# What each of them says, for the refusal.
ENGINE_ONLY_MEANING = {
    Effect.Status.INTENT: "a call about to be made: nobody knows yet whether it was",
    Effect.Status.UNKNOWN: "a call whose outcome nobody knows yet",
    Effect.Status.CONFLICT: "a delivery key the target holds for a different request",
}
# An edit's reason refused, in the ledger's words (runs/ledger/reasons.py checks it).
NO_REASON, WHOSE_REASON = "a ledger edit needs a reason", "a ledger edit's reason"


# A run that waits for a human is leased only for a moment (the sweeper that just interrupted
# it finishing its commit, an approval being refused): an edit waits that long before saying so.
EDIT_LEASE_WAIT = 2.0


def edit_effect(effect_pk: int, changes: dict[str, Any], *, reason: str, actor: str) -> Event:
    """A supervisor's correction of the effect ledger (e.g. "the card was not charged").

    Never silent: it needs a reason, takes the run's lease (so no worker writes beside it),
    and appends LEDGER_EDITED with the user and the before/after values."""
    reason = checked_reason(reason, missing=NO_REASON, refused=LedgerError, what=WHOSE_REASON)
    effect, before, after = _checked_changes(effect_pk, changes)
    run = Run.objects.get(pk=effect.run_id)
    if run.is_active:
        raise LedgerError(
            f"{run.public_id} is {run.status}: a worker owns its ledger; edit it once the run "
            "is interrupted, failed or waiting for approval"
        )
    if not run.is_resumable:
        # A finished (or superseded, or waiting) run's ledger is the history of what it did:
        # an edit could only make it disagree with the outside world after the fact.
        raise LedgerError(
            f"{run.public_id} {run.status_said}: its ledger is edited only "
            "while the run is stopped (interrupted, failed or needing approval)"
        )
    try:
        with leases.writing(run.pk, actor, wait=EDIT_LEASE_WAIT) as token:
            edited = LedgerEdited(
                **effect_names(effect),
                effect=effect.pk,
                before=before,
                after=after,
                reason=reason,
                by=actor,
            )
            event = append(Writer(run.pk, token, actor), edited)
            with ledger_writes():
                Effect.objects.filter(pk=effect.pk).update(
                    status=after["status"],
                    external_id=after["external_id"],
                    error=after["error"],
                    updated_at=Now(),
                )
            # The facts the stored plan was computed from changed: compute it again.
            announce_stop(event, run.status, previous_status=run.status)
    except leases.LeaseBusy:
        raise LedgerError(f"{run.public_id} is leased by a worker right now") from None
    return event


def _checked_changes(
    effect_pk: int, changes: dict[str, Any]
) -> tuple[Effect, dict[str, Any], dict[str, Any]]:
    """The effect and its editable fields before and after `changes`, or LedgerError when
    the effect or the changes are not a correction the ledger takes."""
    unknown = set(changes) - set(EDITABLE_EFFECT_FIELDS)
    if unknown:
        raise LedgerError(f"effect fields {sorted(unknown)} cannot be edited")
    effect = Effect.objects.filter(pk=effect_pk).first()
    if effect is None:
        raise LedgerError(f"effect {effect_pk} does not exist")
    status = changes.get("status", effect.status)
    if status not in Effect.Status.values:
        raise LedgerError(f"unknown effect status {status!r}")
    external_id = str(changes.get("external_id", effect.external_id) or "").strip()
    if status == Effect.Status.CONFIRMED and not external_id:
        raise LedgerError("a confirmed effect needs the external id it produced")
    if status in (Effect.Status.ABANDONED, Effect.Status.FAILED) and external_id:
        # Abandoned says the call is not to happen, failed that it did not; an id says the
        # target made it. Left beside "failed", a resume would make the call a second time.
        raise LedgerError(
            f"a{'n' if status == Effect.Status.ABANDONED else ''} {status} effect has no "
            f"external id: if the target holds {external_id}, it is confirmed; clear the "
            "id only once the target says it does not hold it"
        )
    before = {f: getattr(effect, f) for f in EDITABLE_EFFECT_FIELDS}
    after = {**before, **changes, "status": status, "external_id": external_id}
    if after == before:
        raise LedgerError("nothing changed")
    _check_against_the_target(effect, status, external_id)
    if status in ENGINE_ONLY_STATUSES:
        # Unchanged too: an edit that left an effect in doubt (its error cleared, say) would
        # rewrite what the engine recorded and resolve nothing.
        raise LedgerError(
            f"an edit resolves an effect as {', '.join(RESOLVED_BY_EDIT)}; "
            f"{status} is what only the engine records ({ENGINE_ONLY_MEANING[status]})"
        )
    return effect, before, after


def _check_against_the_target(effect: Effect, status: str, external_id: str) -> None:
    """Refuse an edit that says the opposite of what the effect's target answered when it was
    last asked (TARGET_ASKED): "confirmed" of a charge the processor holds nothing of would
    skip a charge never made, "failed" of one it holds would make it again. The target may
    have changed since: asked again, its new answer is the one held."""
    row = (
        Event.objects.filter(where(TargetAsked, effect=effect.pk), run_id=effect.run_id)
        .order_by("-seq")
        .first()
    )
    said = read(row) if row is not None else None
    why = contradiction(said, status, external_id) if said is not None else ""
    if why:
        asked = f"{effect.target} answered (asked by {said.by}, event #{row.seq})"
        raise LedgerError(f"{asked} that {why}")


def contradiction(said: TargetAsked, status: str, external_id: str) -> str:
    """How an effect's `status` and `external_id` say the opposite of its target's answer
    `said` ("" when they do not, or the answer says neither way): the one rule an edit is
    refused by and the effect page warns by."""
    if said.error or (said.found and not said.matches):
        return ""
    if status == Effect.Status.CONFIRMED and not said.found:
        return "it holds nothing under this key: ask it again before recording the call as made"
    if status == Effect.Status.CONFIRMED and said.external_id not in ("", external_id):
        return f"it holds {said.external_id} under this key, not {external_id}"
    if status in (Effect.Status.FAILED, Effect.Status.ABANDONED) and said.found:
        return (
            f"it holds {said.external_id} under this key: the call was made, so it is "
            "confirmed; ask it again if that changed"
        )
    return ""

"""Asking an effect's target what it holds, for a supervisor about to resolve the effect by
hand ("the card processor holds ch-2"). Only on a POST, never on a page view (a GET never
calls an external system), only for a stopped run and a tool that declares how it is asked
(its `reconcile`), and recorded: the question and the answer are a TARGET_ASKED event in the
run's chain, with the exchanges. Recording the answer in the ledger is then one ledger edit
whose reason names that event."""

from __future__ import annotations

from typing import Any

from runs import events
from runs.events import TargetAsked, effect_names, read
from runs.ledger import edits, leases
from runs.ledger.append import LedgerError, Writer, append
from runs.ledger.edits import edit_effect
from runs.ledger.exchanges import exchanges_payload, recording
from runs.models import Effect, Event, Run
from runs.pipeline import registry


class LookupRefused(Exception):
    """Nothing was asked or written; the message says why."""


def _askable(effect_pk: int) -> tuple[Effect, Run, Any]:
    effect = Effect.objects.filter(pk=effect_pk).first()
    if effect is None:
        raise LookupRefused(f"there is no effect {effect_pk}")
    run = Run.objects.get(pk=effect.run_id)
    if not run.is_resumable:
        raise LookupRefused(
            f"{run.public_id} {run.status_said}: its targets are asked while the run is stopped"
        )
    tool = registry.get(run.pipeline).tool(effect.tool)
    if tool.reconcile is None:
        raise LookupRefused(f"{effect.tool} declares no way to ask its target what it holds")
    return effect, run, tool


def ask_target(effect_pk: int, *, actor: str) -> Event:
    """Ask the effect's target once and record its answer (TARGET_ASKED)."""
    effect, run, tool = _askable(effect_pk)
    answer, error = None, ""
    with recording() as seen:
        try:
            answer = tool.reconcile(effect)
        except Exception as exc:  # a target that cannot answer is recorded as such
            error = str(exc) or type(exc).__name__
    try:
        with leases.writing(run.pk, actor, wait=edits.EDIT_LEASE_WAIT) as token:
            asked = TargetAsked(
                **effect_names(effect),
                effect=effect.pk,
                target=effect.target,
                by=actor,
                found=bool(answer and answer.found),
                matches=bool(answer and answer.found and answer.matches),
                external_id=(answer.external_id if answer else "") or "",
                detail=(answer.detail if answer else "") or "",
                error=error[:2000],
                # Inside the transaction: large bodies become artifact rows that commit
                # with the event or not at all.
                exchanges=exchanges_payload(
                    seen, name=f"lookup/{run.public_id}/{effect.call_id}", run=run
                ),
            )
            return append(Writer(run.pk, token, actor), asked)
    except leases.LeaseBusy:
        raise LookupRefused(f"{run.public_id} is leased by a worker right now") from None


def record_answer(effect_pk: int, asked_seq: int, *, actor: str) -> Event:
    """Resolve the effect as its target's recorded answer says: confirmed with what it holds,
    or failed (it holds nothing: the call never happened there, a new attempt is safe). A
    different request found under the key is for a human to read, not one click."""
    effect = Effect.objects.filter(pk=effect_pk).first()
    asked = (
        Event.objects.filter(
            events.where(TargetAsked, effect=effect_pk),
            run_id=effect.run_id if effect else None,
            seq=asked_seq,
        ).first()
        if effect
        else None
    )
    if asked is None:
        raise LookupRefused("no recorded answer of this effect's target to record")
    said = read(asked)
    where = f"{effect.target} (asked by {said.by}, event #{asked.seq})"
    if said.error:
        raise LookupRefused(f"the target did not answer: {said.error}")
    if said.found and not said.matches:
        raise LookupRefused(f"{where} holds a different request under this key: {said.detail}")
    if said.found:
        changes = {"status": Effect.Status.CONFIRMED, "external_id": said.external_id}
        reason = f"{where} holds {said.external_id}"
    else:
        # An id a supervisor recorded goes with it: the target holds nothing of it.
        changes = {
            "status": Effect.Status.FAILED,
            "external_id": "",
            "error": f"not found on {effect.target}",
        }
        reason = f"{where} holds nothing under this key: it never happened there"
    try:
        return edit_effect(effect.pk, changes, reason=reason, actor=actor)
    except LedgerError as exc:
        raise LookupRefused(str(exc)) from exc

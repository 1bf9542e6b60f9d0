"""The replay decision: what happens to one expected tool call when a run goes on.

One pure function, `decide()`, takes what the ledger recorded about the call's effect, the
tool's replay policy and — where the decision needs it — the target's own answer, and returns
the action. The planner calls it to predict a resume; the engine calls it to act, right before
each call. No other code decides replay, so an approved plan and the engine cannot disagree
about the same facts; when the facts change between the two (a reconcile answer that flips),
the engine's decision differs from the plan's line and the contract check sees it.

    SAFE ................................................. RERUN
        made before in this stage, its result recorded ... REPLAY the recorded result
    no effect yet ........................................ CALL
    confirmed ............................................ REUSE the recorded result
        by a supervisor, RECONCILE_FIRST: ask the target
            held there (or it does not answer) ........... REUSE
            not held, or held under another id ........... BLOCKED
    abandoned by a supervisor ............................ SKIP
    failed (nothing happened):
        a supervisor recorded it:
            RECONCILE_FIRST: ask the target, as for intent below
            the others ................................... CALL
        the target refused a request a human confirmed ... BLOCKED (ask again or close out)
        the target refused it ............................ CALL
    key reused for a different request ................... REFUSE
    the target refused the key (409, another request) .... BLOCKED
    intent / unknown (may or may not have happened):
        IDEMPOTENT ....................................... RETRY_SAME_KEY
        RECONCILE_FIRST: ask the target
            not found .................................... CALL
            found, same request .......................... RECORD_FOUND
            found, different ............................. BLOCKED
        NEVER ............................................ BLOCKED
    no effect, its confirmation rejected (the planner) ... REJECTED
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.db import models

from runs.ledger import derived
from runs.models import EffectStatus, ReplayPolicy
from runs.pipeline import Reconciliation, Tool


class Action(StrEnum):
    """What a resume does about one expected call."""

    REUSE = "reuse"  # confirmed: return the recorded result, no call
    RETRY_SAME_KEY = "retry-same-key"  # idempotent: call again, the target deduplicates
    RECORD_FOUND = "record-found"  # reconcile found it: record as done, do not call again
    CALL = "call"  # nothing happened yet (or the target confirms it did not): call
    RERUN = "re-run"  # SAFE: run again freely
    SKIP = "skip"  # a supervisor abandoned it
    BLOCKED = "blocked"  # a human must decide first
    REFUSE = "refuse"  # the delivery key was used for a different request
    # SAFE, made before by this stage in this run: its recorded result, no call (replay_log.py)
    REPLAY = "replay"
    # A human rejected it at its confirmation: the recorded answer stands (a resume never asks
    # an answered gate again), so the stage is handed the same rejection and nothing is called.
    REJECTED = "rejected"


class StopKind(models.TextChoices):
    """Why a STOPPING decision stops, for machines (triage groups runs by it, and hashes the
    code into the group fingerprint); the reason beside it says the same for people, with the
    run's own details. The labels are the words plans showed for each kind before the codes
    existed; migration 0021 turned those stored words into these codes."""

    KEY_REUSED = "key-reused", "the delivery key was used for a different request"
    # The target's 409.
    KEY_CONFLICT = "key-conflict", "the target holds a different request under this delivery key"
    UNANSWERED = "unanswered", "the target did not answer"
    FOUND_DIFFERENT = "found-different", "found but different"
    # A NEVER effect whose outcome the ledger does not know, by its status.
    INTENT = "intent", "intent"
    UNKNOWN = "unknown", "unknown"
    # The effect row is not what its events say (written behind the append path): the plan
    # does not act on it (runs/ledger/derived.py).
    LEDGER_DISAGREES = "ledger-disagrees", "the effect ledger row disagrees with its events"
    # The target refused the request a human confirmed: sending it again repeats the refusal;
    # the human is asked again, or the run is closed out (runs/gates/reopen.py).
    REFUSED_CONFIRMED = "refused-confirmed", "the target refused the request a human confirmed"
    # The stage, run again, asked for a call it had made with another request: a strict
    # resume would ask the same again (replay_log.py).
    DIVERGED = "diverged", "the stage asked again with another request than it recorded"


def stop_label(kind: str) -> str:
    """A stop kind's words for people; "" (a line that does not stop, or a plan stored before
    kinds were recorded) stays "", and a code this version does not know is shown as it is."""
    return StopKind(kind).label if kind in StopKind.values else kind


# Tools whose call is never guessed about: a RECONCILE_FIRST or NEVER effect that may have
# happened is made again only after the target (or a human) says it did not, and the engine
# stops before a call of theirs that an approved plan did not promise.
GUARDED_POLICIES = frozenset({ReplayPolicy.RECONCILE_FIRST, ReplayPolicy.NEVER})

# Actions that reach the target with the tool's own call (and cost what the call costs).
CALLING = frozenset({Action.CALL, Action.RETRY_SAME_KEY, Action.RERUN})
# Actions that stop the run for a human before anything is called.
STOPPING = frozenset({Action.BLOCKED, Action.REFUSE})
# An unsettled effect: the call may or may not have reached the target.
UNSETTLED = frozenset({EffectStatus.INTENT, EffectStatus.UNKNOWN})


@dataclass(frozen=True)
class Recorded:
    """What the ledger holds about one effect (a row of Effect, or what the planner read)."""

    status: str
    request_hash: str
    external_id: str = ""
    # What the target said when it refused the request (a failed effect's error).
    error: str = ""
    # A failed effect: the supervisor whose ledger edit recorded it ("" when the engine
    # recorded the target's refusal), and the human whose confirmation the refused request
    # was made with (runs/gates/reopen.py). Both read from the events (decide_on()); the
    # engine, never resuming a plan that a refusal blocks, leaves the second empty.
    edited_by: str = ""
    confirmed_by: str = ""

    @classmethod
    def of(cls, effect: Any, *, edited_by: str = "", confirmed_by: str = "") -> Recorded | None:
        if effect is None:
            return None
        return cls(
            effect.status,
            effect.request_hash,
            effect.external_id,
            getattr(effect, "error", ""),
            edited_by,
            confirmed_by,
        )


@dataclass(frozen=True)
class Decision:
    action: Action
    # What the ledger or the target says, for people ("confirmed as art-12").
    answer: str
    # Set for STOPPING actions: why a human has to decide.
    reason: str = ""
    # RECORD_FOUND: what the target holds.
    external_id: str = ""
    # Set for STOPPING actions: why, for machines.
    kind: StopKind | None = None

    @property
    def calls(self) -> bool:
        return self.action in CALLING

    @property
    def stops(self) -> bool:
        return self.action in STOPPING


def asks_target(policy: str, recorded: Recorded | None) -> bool:
    """Whether deciding needs the target's answer: only a RECONCILE_FIRST effect whose outcome
    the ledger does not know, or that a supervisor recorded as failed or confirmed. IDEMPOTENT
    targets deduplicate by key, and NEVER is never guessed about, so neither is asked."""
    return (
        policy == ReplayPolicy.RECONCILE_FIRST
        and recorded is not None
        and (recorded.status in UNSETTLED or _edited(recorded))
    )


def _edited(recorded: Recorded) -> bool:
    # A supervisor's "it did not happen" or "it happened as X" is their word, not the
    # target's: where the target can be asked by the key, it is, before the call is made
    # again or its result reused (a mistaken "failed" publishes an article twice; a mistaken
    # "confirmed as art-1", another run's article, publishes nothing and pays for art-1 again).
    settled = (EffectStatus.FAILED, EffectStatus.CONFIRMED)
    return recorded.status in settled and bool(recorded.edited_by)


def decide(
    *,
    tool: str,
    call_id: str,
    policy: str,
    recorded: Recorded | None,
    request_hash: str = "",
    answer: Reconciliation | None = None,
    unanswered: str = "",
    verb: str = "call",
    target: str = "",
    made: bool = False,
) -> Decision:
    """The action for one call. `request_hash` is the request about to be made (the engine
    knows it; the planner passes "" and assumes the recorded request is repeated). `answer` is
    required exactly when asks_target() says so, unless the target could not be asked:
    `unanswered` then says why, and nobody guesses. `made`: the stage made this very request
    before in this run and recorded its result (replay_log.py)."""
    if policy == ReplayPolicy.SAFE:
        if made:
            # Replayed, not made again: the stage goes on with the facts it had (the facts a
            # reviewer was shown), though SAFE would allow a re-run.
            return Decision(Action.REPLAY, "recorded result replayed")
        return Decision(Action.RERUN, "pure computation")
    if recorded is None:
        return Decision(Action.CALL, "not attempted yet")
    if request_hash and recorded.request_hash != request_hash:
        return Decision(
            Action.REFUSE,
            "the delivery key was used for a different request",
            kind=StopKind.KEY_REUSED,
            reason=f"{tool} ({call_id}): its delivery key was already used for a different "
            "request; nothing was called. A supervisor must settle it on its effect page.",
        )
    status = recorded.status
    if status == EffectStatus.CONFIRMED:
        # A supervisor's word is said as theirs, as a "failed" of theirs is.
        by = f", recorded by a supervisor ({recorded.edited_by})" if recorded.edited_by else ""
        said = f"confirmed as {recorded.external_id}{by}"
        if by and policy == ReplayPolicy.RECONCILE_FIRST:
            return _held(tool, call_id, recorded, answer, unanswered, said)
        return Decision(Action.REUSE, said)
    if status == EffectStatus.ABANDONED:
        return Decision(Action.SKIP, "abandoned by a supervisor")
    if status == EffectStatus.CONFLICT:
        # Nothing happened for this request, yet calling again would send the same key with
        # the same request and get the same 409: only a human can tell which request the
        # target's key belongs to (abandon this one, or confirm what the target holds).
        return Decision(
            Action.BLOCKED,
            "the target holds a different request under this delivery key",
            kind=StopKind.KEY_CONFLICT,
            reason=f"{tool} ({call_id}): the target answered 409, its delivery key was used "
            "for a different request there; nothing is called with this key again. A "
            "supervisor must settle it on its effect page.",
        )
    if status == EffectStatus.FAILED:
        if recorded.edited_by:
            said = f"a supervisor recorded that it did not happen ({recorded.edited_by})"
            if policy != ReplayPolicy.RECONCILE_FIRST:
                return Decision(Action.CALL, said)
            return _reconciled(tool, call_id, answer, unanswered, verb, target, said)
        # The target's words, cut to what a plan line holds (the effect keeps them whole).
        error = recorded.error if len(recorded.error) <= 300 else recorded.error[:299] + "…"
        refused = "the target refused it" + (f" ({error})" if error else "")
        if recorded.confirmed_by:
            # The request is the human's answer: a resume would send it again and be refused
            # again. The human is asked again instead (a new answer, a new key revision).
            said = (
                f"{refused}, after {recorded.confirmed_by} confirmed the request; a resume "
                "would send the same request again: ask again, or close the run out"
            )
            return Decision(
                Action.BLOCKED,
                said,
                kind=StopKind.REFUSED_CONFIRMED,
                reason=f"{tool} ({call_id}): {said}",
            )
        return Decision(Action.CALL, f"{refused}: nothing happened there")
    # INTENT or UNKNOWN: the call may or may not have happened.
    if policy == ReplayPolicy.IDEMPOTENT:
        return Decision(Action.RETRY_SAME_KEY, f"{status}: outcome not recorded")
    if policy == ReplayPolicy.RECONCILE_FIRST:
        return _reconciled(tool, call_id, answer, unanswered, verb, target)
    return Decision(
        Action.BLOCKED,
        f"{status}: outcome unknown",
        kind=StopKind(status),
        reason=f"{tool} ({call_id}) is {policy}: its outcome is {status} and it is never "
        "re-run automatically. A supervisor must settle it on its effect page.",
    )


def _held(
    tool: str,
    call_id: str,
    recorded: Recorded,
    answer: Reconciliation | None,
    unanswered: str,
    said: str,
) -> Decision:
    """A RECONCILE_FIRST effect a supervisor confirmed: reused where its target holds it (or
    cannot be asked: nothing is made again either way), else blocked for a human."""
    if unanswered:
        return Decision(Action.REUSE, f"{said}; the target did not answer: {unanswered}")
    if answer is None:
        raise ValueError(f"{tool} ({call_id}): a supervisor's confirmation needs the answer")
    if answer.found and answer.matches and answer.external_id in ("", recorded.external_id):
        return Decision(Action.REUSE, f"{said}, and the target holds it")
    held = (
        f"the target holds {answer.external_id or 'another request'} under this key"
        if answer.found
        else "the target holds nothing under this key"
    )
    return Decision(
        Action.BLOCKED,
        f"{said}, but {held}",
        kind=StopKind.FOUND_DIFFERENT,
        reason=f"{tool} ({call_id}): {said}, but {held}; nothing is reused or called before "
        "a supervisor settles it on its effect page.",
    )


def _reconciled(
    tool: str,
    call_id: str,
    answer: Reconciliation | None,
    unanswered: str,
    verb: str,
    target: str,
    recorded: str = "",
) -> Decision:
    """A RECONCILE_FIRST effect's decision on what the target answered when asked by the key.
    `recorded`: what the ledger said first, where the answer is said after it."""
    first = f"{recorded}; " if recorded else ""
    if unanswered:
        return Decision(
            Action.BLOCKED,
            f"{first}the target did not answer: {unanswered}",
            kind=StopKind.UNANSWERED,
            reason=f"{tool} ({call_id}): the target did not answer ({unanswered}); nothing "
            "is called before it does. Check targets again.",
        )
    if answer is None:
        raise ValueError(f"{tool} ({call_id}): a RECONCILE_FIRST decision needs the answer")
    # A target's lookup may say nothing more than found or not.
    detail = answer.detail.strip()
    if not answer.found:
        said = f" ({detail})" if detail else ""
        return Decision(Action.CALL, f"{first}not found on the target{said}")
    if answer.matches:
        where = f" ({target})" if target else ""
        return Decision(
            Action.RECORD_FOUND,
            f"{first}found on the target{where}{': ' + detail if detail else ''}; record it, "
            f"do not {verb} again",
            external_id=answer.external_id,
        )
    return Decision(
        Action.BLOCKED,
        f"{first}found but different{': ' + detail if detail else ''}",
        kind=StopKind.FOUND_DIFFERENT,
        reason=f"{tool} ({call_id}): found on the target but different"
        f"{' — ' + detail if detail else ''}. A supervisor must settle it on its effect page.",
    )


def decide_on(
    tool: Tool,
    call_id: str,
    effect: Any,
    *,
    request_hash: str = "",
    ask: Callable[[Any], Reconciliation] | None = None,
    edited_by: str | None = None,
    confirmed_by: str = "",
    made: bool = False,
) -> tuple[Decision, Reconciliation | None]:
    """decide() on what the ledger holds about `effect` (an Effect row, or None), asking the
    target where the decision needs it: the one way the engine, the planner and an approval
    reach a decision, so they cannot disagree on the same facts. `ask` replaces
    tool.reconcile (the engine records the exchange and counts the question); `edited_by`
    and `confirmed_by` say who recorded a failed effect (Recorded); `edited_by` is read from
    the effect's events when not given (the planner reads it for all its effects at once).
    Returns the decision and the target's answer, if it was asked and answered."""
    if edited_by is None:
        # Who settled it matters where a supervisor's word is checked (asks_target): read then.
        settled = effect is not None and (
            effect.status == EffectStatus.FAILED
            or (
                effect.status == EffectStatus.CONFIRMED
                and tool.policy == ReplayPolicy.RECONCILE_FIRST
            )
        )
        edited_by = derived.edited_by(effect) if settled else ""
    recorded = Recorded.of(effect, edited_by=edited_by, confirmed_by=confirmed_by)
    answer, unanswered = None, ""
    if asks_target(tool.policy, recorded):
        try:
            answer = (ask or tool.reconcile)(effect)
        except Exception as exc:  # a target that cannot answer is never guessed about
            unanswered = str(exc) or type(exc).__name__
    decision = decide(
        tool=tool.name,
        call_id=call_id,
        policy=tool.policy,
        recorded=recorded,
        request_hash=request_hash,
        answer=answer,
        unanswered=unanswered,
        verb=tool.verb,
        target=effect.target if effect is not None else "",
        made=made,
    )
    return decision, answer


def first_action(tool: Tool) -> Action:
    """What happens to a call nothing has been recorded for: SAFE re-runs, the others call."""
    return decide(tool=tool.name, call_id="", policy=tool.policy, recorded=None).action


def guards_divergence(tool: Tool, args: dict[str, Any]) -> bool:
    """Whether a call asked for again with another request than it recorded stops its stage
    before anything is sent (unless the pipeline chose to record and go on): a tool never
    guessed about, a model (another conversation is billed again), or an IDEMPOTENT call that
    costs money (another request is another key: charged again). A SAFE or free call is
    recorded and made."""
    if tool.policy in GUARDED_POLICIES:
        return True
    if tool.policy != ReplayPolicy.IDEMPOTENT:
        return False
    return tool.metered is not None or tool.price_of(args) > 0

"""Why a run stopped, in one plain sentence, and the kinds of reason the inbox filters by.

The sentence is read off the event that stopped the run (INTERRUPTED, FAILED,
NEEDS_APPROVAL) or, for resumed work that departed from its approved plan, its PLAN_DEVIATED
event: its type, stage and payload (call, tool, error, reason, and the fields `timed_out` and
`failed_rules`: nothing is read off the words of an error). Where the event names a call,
the sentence says what is at stake for it: the run's stored plan's action for that call when
one was computed after the stop, or else what the tool's replay policy alone says.

    worker lost during upload-cover; the resume retries it with the same key
    publish timed out; the target has it: the resume records it, no second publish
    promote-charge timed out: a supervisor must decide

Pure: no query, no target. The inbox (runs/reads/inbox.py) gathers the events and
plans.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from runs.events import Failed, Interrupted, NeedsApproval, read_payload
from runs.models import EventType, GateKind, GateRole, ReplayPolicy
from runs.planning.replay import Action, StopKind


class ReasonKind(models.TextChoices):
    """What the inbox filters runs that need a human by. Kinds overlap: a failed run's plan may
    also be blocked or drifted. Every stopped run is interrupted or failed; a run that asked
    a human before it acted is waiting, which is not a failure."""

    # The worker or its queued job went away (status interrupted).
    INTERRUPTED = "interrupted", "Interrupted: the worker went away"
    # The stage failed, an outcome is unknown, or the engine stopped before an effect it must
    # not guess about (status failed or needs approval).
    FAILED = "failed", "Failed or stopped for a decision"
    # The stored plan has a blocker: nothing can be approved until a supervisor resolves it.
    BLOCKED = "blocked", "Blocked: a supervisor decides first"
    # The resumed work departed from its approved plan (Run.deviated).
    DEVIATED = "deviated", "Deviated from its approved plan"
    # A pinned input has a newer version than the run was started with (the stored plan).
    DRIFTED = "drifted", "Inputs changed since pinned"
    # A stage asked a human (a review, a confirmation of a call) and the run waits for the
    # answer (status waiting, runs/gates/).
    WAITING = "waiting", "Waiting for a decision"


# The reasons in the inbox's order (Run.severity), as its counts are shown; drifted is not a
# severity of its own (a drifted run is ranked by why it stopped) and comes last.
BY_SEVERITY = (
    ReasonKind.WAITING,
    ReasonKind.BLOCKED,
    ReasonKind.DEVIATED,
    ReasonKind.FAILED,
    ReasonKind.INTERRUPTED,
    ReasonKind.DRIFTED,
)
# Short names for the counts.
SHORT = {
    ReasonKind.WAITING: "Waiting",
    ReasonKind.BLOCKED: "Blocked",
    ReasonKind.DEVIATED: "Deviated",
    ReasonKind.FAILED: "Failed",
    ReasonKind.INTERRUPTED: "Interrupted",
    ReasonKind.DRIFTED: "Drifted",
}

# The events that move a run into a status a human resolves.
STOPPING = (EventType.INTERRUPTED, EventType.FAILED, EventType.NEEDS_APPROVAL)

# The plan was computed after the stop and does not list the call among those whose outcome
# the ledger does not know: the ledger has its outcome now (a supervisor's edit, say).
RESOLVED = "resolved"

MAX_CHARS = 160


def _cut(text: str, limit: int = MAX_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _first_sentence(text: str) -> str:
    """Up to the first full stop followed by a space: the rest of a reason is advice the plan
    page gives in full."""
    head, _, _ = str(text).partition(". ")
    return head.rstrip(".")


def at_stake(planned: str, policy: str, verb: str = "call") -> str:
    """What a resume does about the call the run stopped at, with its separator ("; ..." or
    ": ..."), or "" when nothing is known."""
    if policy == ReplayPolicy.SAFE:
        return "; pure computation: the resume runs it again"
    consequences = {
        Action.RECORD_FOUND: f"; the target has it: the resume records it, no second {verb}",
        Action.CALL: "; not on the target: the resume makes the call",
        Action.RETRY_SAME_KEY: "; the resume retries it with the same key",
        Action.BLOCKED: ": a supervisor must decide",
        Action.REFUSE: ": its key was used for another request, a supervisor must decide",
        Action.SKIP: "; a supervisor abandoned it",
        Action.REJECTED: "; rejected at its confirmation: not called",
        RESOLVED: "; its outcome is in the ledger now",
    }
    if planned in consequences:
        return consequences[planned]
    # No plan's word yet: what the tool's replay policy alone says.
    if policy == ReplayPolicy.NEVER:
        return ": a supervisor must decide"
    if policy == ReplayPolicy.IDEMPOTENT:
        return "; the resume retries it with the same key"
    if policy == ReplayPolicy.RECONCILE_FIRST:
        return "; the plan asks the target whether it happened"
    return ""


def _stopped_for_a_decision(said: NeedsApproval, in_stage: str) -> str:
    if said.kind == StopKind.DIVERGED:
        return (
            f"diverged at {said.call or in_stage}: run again, it asked for another request "
            "than it recorded; nothing was sent"
        )
    return "stopped for a decision" + (f": {_first_sentence(said.error)}" if said.error else "")


def blocked_sentence(unsettled: dict[str, str]) -> str:
    """What a run whose plan is blocked waits for, in place of a price (a blocked plan's
    "0 calls, $0.00" reads as free): the calls a supervisor must settle, from the stored
    plan's actions per unsettled call; else (a confirmed call its target refused, a ledger
    row that disagrees with its events) that a human decides first."""
    calls = [
        where for where, action in unsettled.items() if action in (Action.BLOCKED, Action.REFUSE)
    ]
    if calls:
        return _cut(f"blocked: a supervisor must settle {', '.join(calls)} before any resume")
    return "blocked: a human must decide before any resume (open the run)"


def resume_failed(attempt: int, branch: bool) -> str:
    """Why a resumed run's stop is not one more interruption: someone approved a resume, and
    it did not get through."""
    if attempt == 0 and branch:
        return "its upgrade branch stopped: the approved upgrade did not get through"
    times = "once" if attempt == 1 else f"{attempt} times"
    return f"its resume failed: resumed {times}, it stopped again"


def waiting_sentence(stage: str, gate_id: str, kind: str, role: str, call: dict | None) -> str:
    """Why a waiting run needs a human, from the gate it waits at."""
    call = call if isinstance(call, dict) else {}
    if kind == GateKind.CONFIRM and call.get("tool"):
        who = "a supervisor" if role == GateRole.SUPERVISOR else "an operator"
        return _cut(f"waiting for {who} to confirm {call['tool']} at {stage}/{gate_id}")
    return _cut(f"waiting for a decision at {stage}/{gate_id}")


def sentence(
    event_type: str,
    stage: str,
    payload: dict[str, Any] | None,
    *,
    policy: str = "",
    verb: str = "call",
    planned: str = "",
) -> str:
    """One plain sentence for the event that stopped a run. `policy` and `verb` are those of
    the tool the payload names (runs.pipeline.Tool), `planned` the stored plan's action for
    its call (or RESOLVED); both may be empty."""
    # A payload stored as an artifact reads as its inline summary (runs/events.py).
    said = read_payload(event_type, payload, stage=stage)
    call = str(getattr(said, "call", "") or "")
    error = str(getattr(said, "error", "") or "")
    reason = str(getattr(said, "reason", "") or "")
    in_stage = f"the {stage} stage" if stage else "its stage"

    if isinstance(said, Interrupted):
        if call:
            text = f"worker lost during {call}" + at_stake(planned, policy, verb)
        elif said.job_state:
            state = said.job_state
            text = (
                f"the queued {stage or 'stage'} job was lost from Redis"
                if state == "missing"
                else f"the queued {stage or 'stage'} job never started (RQ: {state})"
            )
        elif said.holder or said.lease_expired_at:
            text = f"worker lost during {in_stage}"
        else:
            text = f"interrupted: {_first_sentence(reason)}" if reason else "interrupted"
    elif isinstance(said, Failed):
        failed = said.failed_rule_names()
        if said.status == "unknown" and call:
            # A FAILED written before `timed_out` was recorded reads as not timed out: "outcome
            # unknown" is as true, and the error's words are never parsed for it.
            head = f"{call} timed out" if said.timed_out else f"{call} outcome unknown"
            text = head + at_stake(planned, policy, verb)
        elif failed is not None:
            text = f"{stage or 'the stage'} output failed its checks" + (
                f": {', '.join(failed)}" if failed else ""
            )
        else:
            text = f"{stage or 'the stage'} failed" + (
                f": {_first_sentence(error)}" if error else ""
            )
    elif isinstance(said, NeedsApproval):
        text = _stopped_for_a_decision(said, in_stage)
    elif event_type == EventType.PLAN_DEVIATED:
        text = "deviated from its approved plan" + (
            f": {_first_sentence(reason)}" if reason else ""
        )
    else:
        text = f"{EventType(event_type).label if event_type in EventType.values else event_type}"
    return _cut(text)

"""The run page's decision, read from the stored plan: both options with what each costs and
what each does to the outside world, what blocks the plan and which effect a supervisor must
resolve, what Ask again may reopen (the confirmed calls a target refused, the answer a stage
failed on), whether the run may be closed out (and, once it was, by whom and why), whether
the stop's plan is still being computed, and whether the worker has gone silent. Pure reads:
nothing here asks a target."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from runs.events import read
from runs.gates.reopen import Refusal, refusals
from runs.gates.sent_back import SentBack, sent_back, turned_down
from runs.ledger import leases
from runs.models import Effect, Event, Run, StoredPlan
from runs.planning.acts import OptionActs, plan_acts
from runs.planning.planner import Plan
from runs.planning.replay import STOPPING, Action, StopKind

# The events after which a stopped run's plan is computed again (a stop, a ledger edit).
PLAN_TRIGGERS = (
    Event.Type.INTERRUPTED,
    Event.Type.FAILED,
    Event.Type.NEEDS_APPROVAL,
    Event.Type.LEDGER_EDITED,
)


@dataclass(frozen=True)
class Option:
    """One way to move the run on: strict resume or upgrade."""

    mode: str
    available: bool
    why_not: str = ""
    stages: str = ""  # "visual → publish"
    calls: int = 0
    money: str = "0"
    # What it does to the outside world, in the tools' verbs and money (planning/acts.py),
    # and that with the drift it keeps or takes, as one sentence.
    acts: list[str] = field(default_factory=list)
    does: str = ""
    # The same, as its confirmation says it (planning/acts.py OptionActs.confirm).
    confirm: str = ""
    # What it leaves alone or does safely, said beside the cost.
    note: str = ""


@dataclass(frozen=True)
class Blocker:
    """One reason the plan is blocked, with the effect a supervisor resolves (if it is one)."""

    text: str
    effect_pk: int | None = None
    effect_run_pk: int | None = None
    label: str = ""
    # The target refused a request a human confirmed: asking again unblocks it, not an edit.
    refused: bool = False
    # The stage asked again with another request than it recorded: a branch runs it afresh,
    # and there is nothing to settle on the effect's page.
    diverged: bool = False


@dataclass
class Decision:
    strict: Option | None = None
    upgrade: Option | None = None
    blockers: list[Blocker] = field(default_factory=list)
    # A stopped run whose plan for this stop is not stored yet: the page keeps asking.
    plan_pending: bool = False
    # Seconds since the worker's last heartbeat, when it is overdue; None otherwise.
    silent_for: int | None = None
    # The confirmed calls a target refused: each one's gate may be asked again.
    refusals: list[Refusal] = field(default_factory=list)
    # The gate whose answer the failed stage failed on (a question that sent it back, a
    # confirmation rejected): it may be asked again too.
    sent_back: SentBack | None = None
    # A closed-out run's CLOSED_OUT: {"by", "reason", "at", "unsettled": [...]}.
    closed: dict | None = None

    @property
    def options(self) -> list[Option]:
        return [o for o in (self.strict, self.upgrade) if o is not None]


def _strict(plan: Plan, words: OptionActs) -> Option:
    if not plan.can_strict:
        why = plan.not_resumable_reason if not plan.resumable else "the plan is blocked"
        return Option("strict", False, why)
    reused = sum(1 for e in plan.effects if e.action in (Action.REUSE, Action.RECORD_FOUND))
    retried = sum(1 for e in plan.effects if e.action == Action.RETRY_SAME_KEY)
    note = [f"reuses {reused}"] if reused else []
    if retried:
        note.append(f"retries {retried} with the same key")
    twice = plan.cost_resume.billed_twice
    if twice:
        # Said in the box as its line says it: a model does not deduplicate a retry.
        money = plan.cost_resume.billed_twice_money
        more = f" (up to ${money} more)" if Decimal(money) else ""
        note.append(f"{twice} may be billed twice{more}")
    else:
        note.append("makes nothing twice")
    return Option(
        "strict",
        True,
        stages=" → ".join(plan.stages_reexecuted) or plan.next_stage,
        calls=plan.cost_resume.tool_calls,
        money=plan.cost_resume.money,
        acts=words.acts,
        does=words.does,
        confirm=words.confirm,
        note=", ".join(note),
    )


def _upgrade(plan: Plan, words: OptionActs) -> Option:
    upgrade = plan.upgrade
    if not plan.can_upgrade:
        if not plan.resumable:
            why = plan.not_resumable_reason
        elif plan.blocked:
            why = "the plan is blocked"
        else:
            why = upgrade.reason
        return Option("upgrade", False, why)
    stages = upgrade.stages_rerun
    return Option(
        "upgrade",
        True,
        stages=f"{stages[0]} → {stages[-1]}" if len(stages) > 1 else "".join(stages),
        calls=upgrade.cost.tool_calls,
        money=upgrade.cost.money,
        acts=words.acts,
        does=words.does,
        confirm=words.confirm,
        note="at most: a call whose request comes out unchanged is reused",
    )


def _blockers(plan: Plan) -> list[Blocker]:
    lines = [e for e in plan.effects if e.action in STOPPING]
    keys = [e.delivery_key for e in lines if e.delivery_key]
    rows = {
        key: (pk, run_pk)
        for key, pk, run_pk in Effect.objects.filter(delivery_key__in=keys).values_list(
            "delivery_key", "pk", "run_id"
        )
    }
    found = []
    for line in lines:
        pk, run_pk = rows.get(line.delivery_key, (None, None))
        found.append(
            Blocker(
                # The call's reason in full (its answer in a plan stored before lines kept
                # their reason), once: the plan's blockers are these same reasons.
                text=line.reason or line.answer,
                effect_pk=pk,
                effect_run_pk=run_pk,
                label=f"{line.tool} ({line.stage}/{line.call_id})",
                refused=line.kind == StopKind.REFUSED_CONFIRMED,
                diverged=line.kind == StopKind.DIVERGED,
            )
        )
    said = {e.reason for e in lines}
    found += [Blocker(text=text) for text in plan.blockers if text not in said]
    return found


def plan_pending(run: Run, stored: StoredPlan | None, plan: Plan | None) -> bool:
    """Whether the stopped run's plan is not stored yet for the facts it stopped with."""
    if not run.is_resumable:
        return False
    if stored is None or plan is None:
        return True
    last = (
        Event.objects.filter(run=run, type__in=PLAN_TRIGGERS)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    return last is not None and plan.last_seq < last


def silent_for(run: Run, now: datetime | None = None) -> int | None:
    """Seconds since the worker holding an active run last renewed its lease, once that is
    longer than it goes between renewals (leases.renewal_interval): before the sweeper's
    verdict, which comes when the lease has run out."""
    lease = getattr(run, "lease", None)
    if not run.is_active or lease is None or not lease.holder or lease.heartbeat_at is None:
        return None
    silence = ((now or timezone.now()) - lease.heartbeat_at).total_seconds()
    return int(silence) if silence > leases.renewal_interval(leases.ttl_seconds()) else None


def closed_out(run: Run) -> dict | None:
    """What the run's close-out recorded (None for a run that is not closed)."""
    if run.status != Run.Status.CLOSED:
        return None
    row = (
        Event.objects.filter(run=run, type=Event.Type.CLOSED_OUT)
        .only("type", "actor", "payload", "created_at")
        .first()
    )
    if row is None:
        return None
    closed = read(row)
    return {
        "by": row.actor,
        "at": row.created_at,
        "reason": closed.reason,
        "unsettled": closed.unsettled,
    }


def decision(
    run: Run, plan: Plan | None, stored: StoredPlan | None, effects: list[Effect] | None = None
) -> Decision:
    """`effects`: the run's effects by id, when the page read them already."""
    found = Decision(plan_pending=plan_pending(run, stored, plan), silent_for=silent_for(run))
    if plan is not None and run.is_resumable:
        words = plan_acts(plan)
        found.strict = _strict(plan, words.strict)
        found.upgrade = _upgrade(plan, words.upgrade)
        found.blockers = _blockers(plan) if plan.blocked else []
    found.refusals = refusals(run, effects)
    if plan is not None and not plan.resumable:
        # Read only where the plan offers no resume, which a sent-back stage's never does, or
        # plans a rejected call: any other run's page makes no query more for them.
        found.sent_back = sent_back(run)
    elif plan is not None and any(e.action == Action.REJECTED for e in plan.effects):
        found.sent_back = turned_down(run)
    found.closed = closed_out(run)
    return found


__all__ = ["Blocker", "Decision", "Option", "decision", "plan_pending", "silent_for"]

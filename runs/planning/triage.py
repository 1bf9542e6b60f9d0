"""Bulk triage: one approval for a whole group of runs that need a human, or a selection of
it. The groups themselves (a plan's shape, its group fingerprint, the inbox's groups) are
runs/planning/grouping.py's; they are read through this module too.

An approval of a group never trusts the group: every run goes through resume.approve() with
the fingerprint of the plan that was stored (and shown); approve() plans afresh and compares
under the run's lock. A run whose plan moved is skipped and listed with its fresh plan, which
approve() stored; the others each get their own PLAN_APPROVED, naming the batch.

A group larger than RESUMER_GROUP_INLINE is not approved in the request: it is recorded as a
GroupApproval row and carried out by a worker; this module owns that row's states.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models.functions import Now

from runs import ids, quantities
from runs.enqueue import enqueue_batch
from runs.ledger import leases
from runs.models import ApprovalMode, GroupApproval, Run, StoredPlan
from runs.planning import stored_plans
from runs.planning.grouping import (
    FINGERPRINT_RE,
    Group,
    Member,
    Triage,
    group,
    group_fingerprint,
    groups,
    shape_of,
)
from runs.planning.planner import Plan
from runs.planning.resume import AlreadyApproved, Approval, ResumeRefused, approve

# The groups are read through this module as well (the CLI, the dashboard, the tests).
__all__ = [
    "BadSelection",
    "Batch",
    "Group",
    "GroupRefused",
    "Member",
    "GroupOutcome",
    "NotQueued",
    "Skipped",
    "Triage",
    "approve_group",
    "approve_or_queue",
    "group",
    "group_fingerprint",
    "groups",
    "parse_run_ids",
    "run_batch",
    "shape_of",
    "start_batch",
]


class GroupRefused(Exception):
    """The batch is refused as a whole (an empty or unapprovable group): nothing was changed."""

    # The HTTP status every face answers it with (the dashboard's page, the API's problem):
    # a conflict with what the runs became, unless a subclass says otherwise.
    status = 409


class BadSelection(GroupRefused):
    """The request itself is wrong (not a fingerprint, an unknown action or run, nothing
    selected): nothing was changed."""

    status = 400


class NotQueued(GroupRefused):
    """A large group's approval was recorded but its job could not be queued: nothing was
    approved, and the GroupApproval row says FAILED, with why."""

    # The queue is down: the same request may succeed later.
    status = 503


# --- Approving a group -----------------------------------------------------------------------


@dataclass(frozen=True)
class Skipped:
    run_pk: int
    reason: str
    # The run's fresh plan (stored when it was computed), when there is one.
    plan: Plan | None = None

    @property
    def public_id(self) -> str:
        return ids.run_id(self.run_pk)

    @property
    def group(self) -> str:
        return group_fingerprint(self.plan.to_dict()) if self.plan is not None else ""


@dataclass
class Batch:
    id: str
    group: str
    mode: ApprovalMode
    approved: list[Approval] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def outcome(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """What was approved and what skipped, as a GroupApproval row records them and the
        batch's page and the API show them, whether a worker or the request approved the
        group."""
        approved = [
            {
                "run": a.run.pk,
                "resumed": a.resumed.pk,
                "branch": a.branch is not None,
                "stage": a.resumed.current_stage,
            }
            for a in self.approved
        ]
        skipped = [
            {
                "run": s.run_pk,
                "reason": s.reason,
                "plan": None
                if s.plan is None
                else {
                    "fingerprint": s.plan.fingerprint,
                    "next_stage": s.plan.next_stage,
                    "calls": s.plan.cost_resume.tool_calls,
                    "money": quantities.amount(s.plan.cost_resume.money),
                    "blocked": bool(s.plan.blockers),
                    "group": s.group,
                },
            }
            for s in self.skipped
        ]
        return approved, skipped


# The unknown runs a refusal names one by one.
SAID_AT_MOST = 10


def parse_run_ids(values: list[str]) -> list[int]:
    """Run ids as typed ("run-12", "12") to primary keys; GroupRefused names a bad one."""
    pks = []
    for value in values:
        value = value.strip()
        pk = ids.parse_run_id(value, bare=True)
        if pk is None:
            raise BadSelection(f"{value!r} is not a run id (e.g. run-123)")
        pks.append(pk)
    return pks


def _check(
    group_fingerprint: str, run_ids: list[int] | None, action: str
) -> tuple[dict[int, Member], list[int]]:
    """The group's runs by pk, and the runs to approve; GroupRefused, changing nothing, for
    bad input or a group that cannot be approved at all. Three queries."""
    if not FINGERPRINT_RE.match(group_fingerprint or ""):
        raise BadSelection("a group fingerprint is 64 hexadecimal characters")
    if action not in ApprovalMode.values:
        raise BadSelection(f"unknown action {action!r}: choose {' or '.join(ApprovalMode.values)}")
    if run_ids is not None:
        run_ids = sorted(set(run_ids))
        if not run_ids:
            raise BadSelection("select at least one run")
        missing = set(run_ids) - set(
            Run.objects.filter(pk__in=run_ids).values_list("pk", flat=True)
        )
        if missing:
            named = [f"run-{pk}" for pk in sorted(missing)]
            # A script's list of thousands is named by its first few, not echoed whole.
            more = f" and {len(named) - SAID_AT_MOST:,} more" if len(named) > SAID_AT_MOST else ""
            raise BadSelection(f"there is no {', '.join(named[:SAID_AT_MOST])}{more}")
    found = group(group_fingerprint)
    if found is None:
        raise GroupRefused(
            "no run needing a human has a plan of this shape now (approved meanwhile, or "
            "their plans changed): read the groups again"
        )
    shown, members = found
    if not shown.shape["resumable"]:
        raise GroupRefused("these runs are not resumable as they stand")
    if shown.blocked:
        raise GroupRefused(
            "the group's plan is blocked: a supervisor resolves each run's blocker in the "
            "ledger first"
        )
    if action == ApprovalMode.UPGRADE and not shown.upgrade_available:
        raise GroupRefused("no upgrade is offered for this group: its inputs have not changed")
    in_group = {m.run_pk: m for m in members}
    return in_group, list(in_group) if run_ids is None else run_ids


def approve_group(
    group_fingerprint: str,
    run_ids: list[int] | None = None,
    *,
    action: str = ApprovalMode.STRICT,
    actor: str,
    batch_id: str = "",
    each: Callable[[Batch], None] | None = None,
) -> Batch:
    """Approve `action` for every run of the group (or the selected `run_ids` of it).

    Each run is approved on its own, with the fingerprint of its stored plan: resume.approve()
    plans afresh and compares under the run's row lock, so a run whose plan changed is
    skipped, its fresh plan stored and returned, never approved blind. Selected runs that are
    no longer in the group are skipped the same way. Raises GroupRefused, changing nothing,
    for bad input or a group that cannot be approved at all. `each` is called after every
    run (the background job records its progress with it)."""
    in_group, wanted = _check(group_fingerprint, run_ids, action)
    runs = Run.objects.in_bulk(wanted)
    batch = Batch(batch_id or uuid.uuid4().hex, group_fingerprint, ApprovalMode(action))
    for pk in wanted:
        run = runs[pk]
        member = in_group.get(pk)
        if member is None:
            batch.skipped.append(_not_in_group(run, group_fingerprint))
        else:
            try:
                batch.approved.append(
                    approve(run, action, member.fingerprint, actor=actor, batch=batch.id)
                )
            except AlreadyApproved:
                batch.skipped.append(Skipped(pk, "already approved; nothing more was done"))
            except ResumeRefused as exc:  # StalePlan included: the plan moved since it was shown
                batch.skipped.append(Skipped(pk, str(exc), exc.plan))
            except leases.LeaseBusy:
                batch.skipped.append(
                    Skipped(pk, "another process took the run's lease at that moment; try again")
                )
        if each is not None:
            each(batch)
    return batch


def _not_in_group(run: Run, group_fingerprint: str) -> Skipped:
    """A selected run whose stored plan is not of the group's shape: not any more, or never
    (a run named by mistake), which its stored plan before this tells apart."""
    if not run.is_resumable:
        return Skipped(
            run.pk,
            f"it {run.status_said} now: it no longer needs a human",
        )
    was = StoredPlan.objects.filter(run=run).values_list("shape", flat=True).first()
    # Compute it now, asking its targets, so the operator reads what it is.
    fresh = stored_plans.refresh(run)
    if was != group_fingerprint:
        return Skipped(run.pk, "it is not in this group: its plan is of another shape", fresh)
    return Skipped(run.pk, "its plan changed since the group was shown; read the fresh plan", fresh)


# --- Approving a group in the background -----------------------------------------------------
#
# Approving hundreds of runs takes minutes (each approval plans afresh and asks the targets),
# longer than a web request may take. A large group's approval is recorded as a GroupApproval
# row (start_batch, in the request: the same checks as approve_group, so a bad or
# unapprovable group is refused at once), a worker carries it out (run_batch, from the RQ job
# jobs.approve_batch), and the batch page reads the row.

# How many results the job collects between two saves of the row (its progress on the page).
SAVE_EVERY = 10


@dataclass(frozen=True)
class GroupOutcome:
    """What an operator's approval of a group came to: approved in the request (`batch`), or
    recorded for a worker (`queued`, the row the batch page follows)."""

    batch: Batch | None = None
    queued: GroupApproval | None = None


def approve_or_queue(
    group_fingerprint: str, run_ids: list[int], *, mode: ApprovalMode, actor: str
) -> GroupOutcome:
    """The dashboard's approval of a group: up to RESUMER_GROUP_INLINE runs are approved now
    (approve_group), more are recorded now and approved by a worker (start_batch, then its
    job). Raises GroupRefused, changing nothing, as those refuse; NotQueued when the job could
    not be queued (the row then says FAILED)."""
    if len(run_ids) <= settings.RESUMER_GROUP_INLINE:
        batch = approve_group(group_fingerprint, run_ids, action=mode, actor=actor)
        _record_inline(batch, run_ids, actor)
        return GroupOutcome(batch=batch)
    row = start_batch(group_fingerprint, run_ids, action=mode, actor=actor)
    try:
        enqueue_batch(row.pk, row.total)
    except Exception as exc:  # Redis away: nothing was approved, and the row says why
        row.state, row.error = GroupApproval.State.FAILED, f"the job could not be queued: {exc}"
        _save(row)
        raise NotQueued(row.error) from exc
    return GroupOutcome(queued=row)


def _record_inline(batch: Batch, run_ids: list[int], actor: str) -> None:
    """An approval made in the request is recorded too, done, so the batch every
    PLAN_APPROVED of it names has a page (/runs/batches/<id>/) like a queued one."""
    row = GroupApproval(
        id=batch.id,
        group=batch.group,
        action=batch.mode,
        actor=actor,
        run_ids=sorted(set(run_ids)),
        state=GroupApproval.State.DONE,
    )
    _record(row, batch)
    row.save(force_insert=True)


def start_batch(
    group_fingerprint: str, run_ids: list[int], *, action: str, actor: str
) -> GroupApproval:
    """Check the approval and record it, to be carried out by run_batch(). GroupRefused,
    recording nothing, as approve_group would refuse it now."""
    _, wanted = _check(group_fingerprint, run_ids, action)
    return GroupApproval.objects.create(
        id=uuid.uuid4().hex, group=group_fingerprint, action=action, actor=actor, run_ids=wanted
    )


def run_batch(batch_id: str) -> GroupApproval:
    """Carry out a recorded group approval: approve_group() over its runs, each checked
    against its own plan under its lock, the row saved every SAVE_EVERY runs and at the end.

    Run again (a retried job), it approves nothing twice: the runs it approved are resuming,
    no longer in the group, and are skipped as such."""
    row = GroupApproval.objects.get(pk=batch_id)
    if row.finished:
        return row
    row.state = GroupApproval.State.RUNNING
    row.approved, row.skipped = [], []
    _save(row)

    def each(batch: Batch) -> None:
        if (len(batch.approved) + len(batch.skipped)) % SAVE_EVERY == 0:
            _record(row, batch)
            _save(row)

    try:
        batch = approve_group(
            row.group, row.run_ids, action=row.action, actor=row.actor, batch_id=row.id, each=each
        )
    except GroupRefused as exc:
        row.state, row.error = GroupApproval.State.REFUSED, str(exc)
    except Exception as exc:
        row.state, row.error = GroupApproval.State.FAILED, f"{type(exc).__name__}: {exc}"
        _save(row)
        raise
    else:
        _record(row, batch)
        row.state = GroupApproval.State.DONE
    _save(row)
    return row


def _record(row: GroupApproval, batch: Batch) -> None:
    row.approved, row.skipped = batch.outcome()


def _save(row: GroupApproval) -> None:
    row.updated_at = Now()
    row.save(update_fields=["state", "approved", "skipped", "error", "updated_at"])
    row.refresh_from_db(fields=["updated_at"])

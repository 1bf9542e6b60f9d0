"""Applying an approved plan: strict resume, or upgrade inputs into a new branch.

An approval names the plan's fingerprint. The plan is computed again; if anything it was
computed from changed (a new event, another approval, a ledger edit, a new reconcile answer)
the fingerprints differ and the approval is refused with the fresh plan. The run row lock and
the version compare-and-set make two simultaneous approvals resume once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db import transaction
from django.db.models.functions import Now

from runs import enqueue, events, ids
from runs.events import Branched, PlanApproved, Resumed, RunCreated
from runs.ledger import leases
from runs.ledger.append import RunMove, Writer, append, create_run
from runs.ledger.effects import record_found
from runs.models import ApprovalMode, Checkpoint, Effect, Event, Run, StoredPlan
from runs.pipeline import registry
from runs.planning import replay, stored_plans
from runs.planning.contract import Contract
from runs.planning.planner import Action, Plan, compute_plan


class ResumeRefused(Exception):
    """The approval changes nothing; `plan` is the fresh plan to show instead. approve()
    stores it as the run's plan, `stored` its row."""

    def __init__(self, message: str, plan: Plan | None = None) -> None:
        super().__init__(message)
        self.plan = plan
        self.stored: StoredPlan | None = None


class StalePlan(ResumeRefused):
    pass


class AlreadyApproved(ResumeRefused):
    """This exact plan was approved before with the same action (a double click, a re-sent
    form or command): the same decision again, not a stale one. Nothing more is done."""


@dataclass(frozen=True)
class Approval:
    run: Run
    mode: ApprovalMode
    branch: Run | None = None

    @property
    def resumed(self) -> Run:
        return self.branch or self.run


def load_run(public_id: str) -> Run:
    pk = ids.parse_run_id(public_id)
    run = Run.objects.filter(pk=pk).first() if pk is not None else None
    if run is None:
        raise ResumeRefused(f"unknown run {public_id!r}")
    return run


def approve(run: Run, mode: str, fingerprint: str, *, actor: str, batch: str = "") -> Approval:
    """Approve `mode` (an ApprovalMode) on the plan with `fingerprint`. Raises ResumeRefused
    (StalePlan, AlreadyApproved) and changes nothing in the run when the approval does not
    hold; the refusal's fresh plan is then the run's stored plan. `batch` names the bulk
    approval this one is part of (runs/planning/triage.py); PLAN_APPROVED records it."""
    if mode not in ApprovalMode.values:
        raise ResumeRefused(f"unknown action {mode!r}: choose {' or '.join(ApprovalMode.values)}")
    try:
        return _approve(run, mode, fingerprint, actor=actor, batch=batch)
    except ResumeRefused as exc:
        # Refused because this very plan was approved a moment ago, with the same mode (a
        # double click, a re-sent form or command, a second approver just behind the first):
        # the same decision again, which lands where the first one did. The dashboard and
        # `manage.py resume` both say so instead of showing a refusal.
        if _approved_before(run, mode, fingerprint):
            raise AlreadyApproved(
                "This plan was already approved; nothing more was done.", exc.plan
            ) from exc
        # Whoever refused it shows the fresh plan next (the dashboard, a group's skipped run,
        # the CLI's hint), and a page must show the same: it becomes the stored plan. Without
        # one (the target's answer moved under the approval), it is computed again.
        if exc.plan is None:
            exc.plan = compute_plan(run)
        exc.stored = stored_plans.store(exc.plan)
        raise


def _approve(run: Run, action: str, fingerprint: str, *, actor: str, batch: str) -> Approval:
    run.refresh_from_db()
    plan = compute_plan(run)
    _check(plan, action, fingerprint)
    with transaction.atomic():
        # On PostgreSQL this lock queues a second approver behind the first; on SQLite the
        # IMMEDIATE transaction already did. Either way the second sees the bumped version.
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.version != plan.run_version or not locked.is_resumable:
            raise StalePlan(
                f"{run.public_id} changed since this plan was computed "
                f"(now {locked.get_status_display().lower()}, version {locked.version}); "
                "read the fresh plan and approve again",
                compute_plan(locked),
            )
        with leases.taken_over(run.pk, actor) as token:
            approval = _apply(Writer(run.pk, token, actor), locked, plan, action, actor, batch)
    # The rows were read before the approval's own appends; hand back what they are now
    # (status resuming or superseded, the stage it resumes at) to the CLI and the views.
    approval.run.refresh_from_db()
    if approval.branch is not None:
        approval.branch.refresh_from_db()
    return approval


def _apply(
    writer: Writer, locked: Run, plan: Plan, action: str, actor: str, batch: str
) -> Approval:
    """The approval's writes under the lease taken over for them: PLAN_APPROVED, what the
    plan's reconcile queries found, then the resume or the branch."""
    strict = action == ApprovalMode.STRICT
    approved = PlanApproved(
        stage=plan.next_stage,
        action=action,
        fingerprint=plan.fingerprint,
        checkpoint=plan.checkpoint,
        next_stage=plan.next_stage if strict else plan.upgrade.branch_stage,
        reexecute=plan.stages_reexecuted if strict else plan.upgrade.stages_rerun,
        by=actor,
        batch=batch,
    )
    append(writer, approved)
    # Whichever way it goes on, the approved run's ledger now records what the plan's
    # reconcile queries found (a superseded parent too: its history says what it made).
    _record_reconciliations(writer, plan)
    if strict:
        return _strict(writer, locked, plan)
    return _upgrade(writer, locked, plan, actor)


def _approved_before(run: Run, action: str, fingerprint: str) -> bool:
    return Event.objects.filter(
        events.where(PlanApproved, fingerprint=fingerprint, action=action), run_id=run.pk
    ).exists()


def _check(plan: Plan, action: str, fingerprint: str) -> None:
    if not plan.resumable:
        raise ResumeRefused(plan.not_resumable_reason, plan)
    if not fingerprint or fingerprint != plan.fingerprint:
        raise StalePlan(
            "the plan changed since it was shown (or the fingerprint is not this run's); "
            "nothing was resumed — read the fresh plan and approve again",
            plan,
        )
    if plan.blockers and not (action == ApprovalMode.UPGRADE and plan.branchable):
        raise ResumeRefused("the plan is blocked: " + " ".join(plan.blockers), plan)
    if action == ApprovalMode.UPGRADE and not plan.upgrade.available:
        raise ResumeRefused(f"no upgrade is possible: {plan.upgrade.reason}", plan)


def _record_reconciliations(writer: Writer, plan: Plan) -> None:
    """Write down what the reconcile queries found, now that a human approved the plan. The
    target is asked once more and the answer goes through the same replay.decide_on() as the
    plan's: if it no longer says "record it", nothing is recorded."""
    pipeline = registry.get(plan.pipeline)
    for line in plan.effects:
        if line.action != Action.RECORD_FOUND:
            continue
        effect = Effect.objects.get(delivery_key=line.delivery_key)
        tool = pipeline.tool(effect.tool)
        decision, answer = replay.decide_on(tool, effect.call_id, effect)
        if decision.action != Action.RECORD_FOUND:
            # The target's answer moved between the plan and this approval: the transaction
            # rolls back and the operator gets the fresh plan, not a half-recorded effect.
            raise StalePlan(
                f"{effect.tool} ({effect.call_id}): the target no longer confirms what the plan "
                f"showed ({decision.answer}); read the fresh plan and approve again",
                None,
            )
        record_found(writer, effect, answer)


def _strict(writer: Writer, run: Run, plan: Plan) -> Approval:
    ticket = uuid.uuid4().hex
    resumed = Resumed(
        stage=plan.next_stage,
        mode=ApprovalMode.STRICT,
        checkpoint=plan.checkpoint,
        next_stage=plan.next_stage,
        pinned_inputs=run.inputs,
        # The approved plan's promise: the engine holds every call of the resumed work
        # against it (runs/planning/contract.py).
        contract=Contract.from_plan(
            plan.fingerprint,
            ApprovalMode.STRICT,
            plan.effects,
            plan.cost_resume,
            plan.gates,
            plan.open_stages,
        ).to_payload(),
    )
    append(
        writer,
        resumed,
        move=RunMove(
            Run.Status.RESUMING,
            deviated=False,
            current_stage=plan.next_stage,
            ticket=ticket,
            queued_at=Now(),
            attempt=run.attempt + 1,
        ),
    )
    transaction.on_commit(lambda: enqueue.dispatch(run.pk, plan.next_stage, ticket))
    return Approval(run, ApprovalMode.STRICT)


def _upgrade(writer: Writer, run: Run, plan: Plan, actor: str) -> Approval:
    upgrade = plan.upgrade
    point = (
        Checkpoint.objects.get(pk=upgrade.branch_checkpoint) if upgrade.branch_checkpoint else None
    )
    ticket = uuid.uuid4().hex
    created = RunCreated(
        input_versions=upgrade.inputs,
        branched_from=run.public_id,
        checkpoint=upgrade.branch_checkpoint,
        upgraded={d.input: [d.pinned, d.current] for d in plan.drift},
        warnings=upgrade.warnings_data(),
        contract=Contract.from_plan(
            plan.fingerprint,
            ApprovalMode.UPGRADE,
            upgrade.effects,
            upgrade.cost,
            upgrade.gates,
            registry.get(run.pipeline).open_stages(upgrade.stages_rerun),
        ).to_payload(),
    )
    branch = create_run(
        run.pipeline,
        created,
        actor=actor,
        first_stage=upgrade.branch_stage,
        parent=run,
        branch_checkpoint=point,
        ticket=ticket,
    )
    branched = Branched(
        branch=branch.public_id,
        checkpoint=upgrade.branch_checkpoint,
        inputs=upgrade.inputs,
        warnings=upgrade.warnings_data(),
    )
    append(writer, branched, move=RunMove(Run.Status.SUPERSEDED))
    transaction.on_commit(lambda: enqueue.dispatch(branch.pk, upgrade.branch_stage, ticket))
    return Approval(run, ApprovalMode.UPGRADE, branch)

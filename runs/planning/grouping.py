"""Grouping: the runs that need a human, grouped by the shape of their stored plan.

After an outage hundreds of runs stop at once, and most of their plans say the same thing in
different words: different run ids, delivery keys and external ids, the same decision. A
plan's **shape** keeps only what a human decides on:

    pipeline, status, the stage a strict resume starts at (and the checkpoint's stage),
    whether a checkpoint was passed over, the action per expected (stage, call),
    the blockers (which call, and what kind: no answer / found but different / unknown …),
    the input drift (pinned → current), whether an upgrade branch is offered and where

and nothing run-specific (no run ids, keys, external ids, timestamps, answers' details).
The **group fingerprint** is the sha256 of the shape's canonical JSON. It is stored with each
run's plan (StoredPlan.shape, written by stored_plans.store), so the inbox groups runs with
one aggregate query and never reads or computes a plan per run.

Approving a group is runs/planning/triage.py's; this module only reads, and imports nothing
of the planning layer but the replay vocabulary and the plan's words (acts.py, on the plan
value), so stored_plans can build on it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import Count, F, Min, QuerySet, Sum

from runs import ids
from runs.ledger.chain import digest
from runs.models import Run, StoredPlan
from runs.planning.acts import PlanActs, plan_acts
from runs.planning.plan import Plan
from runs.planning.replay import STOPPING, Action, stop_label
from runs.quantities import money

FINGERPRINT_RE = re.compile(r"^[0-9a-f]{64}$")
# Bumped when the shape's definition changes: stored shapes of an older definition then group
# apart instead of mixing with new ones (they are recomputed when their plans are).
SHAPE_VERSION = 1


# --- The shape -------------------------------------------------------------------------------


def shape_of(plan: dict[str, Any]) -> dict[str, Any]:
    """The decision a stored plan (planner.Plan.to_dict()) asks for, without the run."""
    blockers = []
    effects = []
    for line in plan["effects"]:
        effects.append([line["stage"], line["call_id"], line["tool"], line["action"]])
        if line["action"] in STOPPING:
            # Why it stops, not the run's own details (an error message, what the target
            # holds): replay.StopKind's code, so rewording its label regroups nothing; "" in
            # a plan stored before the kind was recorded.
            blockers.append([line["stage"], line["call_id"], line["status"], line.get("kind", "")])
    upgrade = plan["upgrade"]
    return {
        "v": SHAPE_VERSION,
        "pipeline": plan["pipeline"],
        "status": plan["status"],
        "resumable": plan["resumable"],
        "next_stage": plan["next_stage"],
        "checkpoint_stage": plan["checkpoint_stage"],
        "fell_back": bool(plan["fallbacks"]),
        "effects": effects,
        "blockers": blockers,
        "drift": [[d["input"], d["pinned"], d["current"]] for d in plan["drift"]],
        "upgrade": [upgrade["available"], upgrade["branch_stage"] if upgrade["available"] else ""],
    }


def group_fingerprint(plan: dict[str, Any]) -> str:
    return digest(shape_of(plan))


# --- Groups in the inbox ---------------------------------------------------------------------


STATUS_WORDS = {
    Run.Status.INTERRUPTED: "interrupted",
    Run.Status.FAILED: "failed",
    Run.Status.NEEDS_APPROVAL: "waiting for approval",
}

ACTION_WORDS = {
    Action.REUSE: "reuses",
    Action.RETRY_SAME_KEY: "retries with the same key",
    Action.RECORD_FOUND: "records what the target has for",
    Action.CALL: "calls",
    Action.RERUN: "re-runs",
    Action.SKIP: "skips (abandoned)",
    Action.REJECTED: "does not call (rejected)",
}


@dataclass
class Group:
    fingerprint: str
    shape: dict[str, Any]
    count: int
    # What a strict resume of every run in the group costs, from the stored plans.
    resume_money: Decimal
    fresh_money: Decimal
    # What each run's strict resume and upgrade do outside, as one run's plan says it
    # (acts.py, without the targets each run names for itself).
    acts: PlanActs | None = None

    @property
    def status(self) -> str:
        return self.shape["status"]

    @property
    def next_stage(self) -> str:
        return self.shape["next_stage"]

    @property
    def blocked(self) -> bool:
        return bool(self.shape["blockers"])

    @property
    def approvable(self) -> bool:
        return self.shape["resumable"] and not self.blocked

    @property
    def upgrade_available(self) -> bool:
        return bool(self.shape["upgrade"][0]) and self.approvable

    @property
    def headline(self) -> str:
        runs = f"{self.count} run{'s' if self.count != 1 else ''}"
        status = STATUS_WORDS.get(self.status, self.status)
        return f"{runs} {status} at {self.next_stage}"

    @property
    def summary(self) -> str:
        """What a strict resume does to each run: "reuses render_image ×3, upload_asset ×2;
        retries with the same key upload_asset ×1; calls publish_article"."""
        return describe(self.shape)

    @property
    def sentence(self) -> str:
        """One line for a notice or a terminal: headline — what it does, what it costs."""
        if not self.approvable:
            return f"{self.headline} — {self.summary}"
        does = self.acts.strict.does if self.acts is not None else ""
        return (
            f"{self.headline} — strict resume {self.summary} each, "
            f"{money(self.resume_money)} in total" + (f"; each {does}" if does else "")
        )


def describe(shape: dict[str, Any]) -> str:
    if not shape["resumable"]:
        return "not resumable as it stands: each run's page says why, and the way on"
    if shape["blockers"]:
        calls = ", ".join(
            f"{stage}/{call} ({stop_label(kind)})" for stage, call, _, kind in shape["blockers"]
        )
        return f"blocked until a supervisor resolves {calls}"
    per_action: dict[str, Counter[str]] = {}
    for _, _, tool, action in shape["effects"]:
        per_action.setdefault(action, Counter())[tool] += 1
    parts = []
    for action, words in ACTION_WORDS.items():
        tools = per_action.get(action)
        if tools:
            parts.append(f"{words} " + ", ".join(f"{t} ×{n}" for t, n in sorted(tools.items())))
    text = "; ".join(parts) or "makes no tool call"
    if shape["drift"]:
        changed = ", ".join(f"{name} {old} → {new}" for name, old, new in shape["drift"])
        text += f" (inputs changed since pinned: {changed})"
    return text


def _acts(data: dict[str, Any]) -> PlanActs:
    return plan_acts(Plan.from_dict(data), where=False)


@dataclass
class Triage:
    groups: list[Group]
    # Stopped runs (a resume's to plan: not a gate's, nor a finished run's deviation) whose
    # plan is not stored for their current version yet (the plan job has not run, or could
    # not be queued): they join a group once it has.
    unplanned: int = 0


def _current(plans: QuerySet[StoredPlan]) -> QuerySet[StoredPlan]:
    """Stored plans of runs that need a human, computed at the run's current version."""
    return plans.filter(run__attention=0, run_version=F("run__version"))


def groups(runs: QuerySet[Run] | None = None) -> Triage:
    """The runs that need a human (of `runs`, else all), grouped by plan shape, largest
    group first. Three queries whatever the number of runs: the aggregate, one stored plan
    per group (to describe it), and the count of runs without a current plan."""
    plans = _current(StoredPlan.objects.all())
    # A run waiting at a gate, or a finished run's deviation, needs a human and no plan.
    needing = Run.objects.filter(attention=0, status__in=Run.RESUMABLE)
    if runs is not None:
        plans = plans.filter(run__in=runs.values("pk"))
        needing = needing.filter(pk__in=runs.values("pk"))
    rows = list(
        plans.values("shape")
        .annotate(
            count=Count("run_id"),
            resume=Sum("resume_money"),
            fresh=Sum("fresh_money"),
            sample=Min("run_id"),
        )
        .order_by("-count", "shape")
    )
    samples = dict(
        StoredPlan.objects.filter(run_id__in=[r["sample"] for r in rows]).values_list(
            "run_id", "data"
        )
    )
    found = [
        Group(
            fingerprint=row["shape"],
            shape=shape_of(samples[row["sample"]]),
            count=row["count"],
            resume_money=row["resume"] or Decimal(0),
            fresh_money=row["fresh"] or Decimal(0),
            acts=_acts(samples[row["sample"]]),
        )
        for row in rows
    ]
    unplanned = needing.exclude(stored_plan__run_version=F("version")).count()
    return Triage(found, unplanned)


@dataclass
class Member:
    run_pk: int
    fingerprint: str
    status: str
    current_stage: str
    resume_money: Decimal

    @property
    def public_id(self) -> str:
        return ids.run_id(self.run_pk)


def group(fingerprint: str) -> tuple[Group, list[Member]] | None:
    """One group with its runs (oldest first), or None when no run needing a human has a
    plan of this shape now. Two queries."""
    members = [
        Member(row["run_id"], row["fingerprint"], row["run__status"], row["run__current_stage"],
               row["resume_money"])
        for row in _current(StoredPlan.objects.filter(shape=fingerprint))
        .order_by("run_id")
        .values("run_id", "fingerprint", "run__status", "run__current_stage", "resume_money")
    ]  # fmt: skip
    if not members:
        return None
    data = StoredPlan.objects.values_list("data", flat=True).get(run_id=members[0].run_pk)
    found = Group(
        fingerprint=fingerprint,
        shape=shape_of(data),
        count=len(members),
        resume_money=sum((m.resume_money for m in members), Decimal(0)),
        fresh_money=Decimal(0),
        acts=_acts(data),
    )
    return found, members

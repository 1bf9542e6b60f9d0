"""The inbox: runs by keyset page, each with why it needs a human, and their groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import reduce
from operator import or_

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery

from runs.events import read
from runs.models import Event, Gate, GateStatus, Run, StoredPlan
from runs.pipeline import UnknownPipeline, registry
from runs.planning import grouping
from runs.reads import stops
from runs.reads.stops import ReasonKind

# Small enough that the pager is in reach on a phone, where every row is a card.
INBOX_PAGE_SIZE = 20


# Columns the inbox shows; the JSON column (inputs) stays in the database.
INBOX_FIELDS = (
    "id",
    "pipeline",
    "status",
    "attention",
    "severity",
    "deviated",
    "current_stage",
    "attempt",
    "version",
    "last_seq",
    "parent_id",
    "created_at",
    "updated_at",
)
# What a row shows of the run's stored plan (joined in the same query; `data` stays behind).
INBOX_PLAN_FIELDS = tuple(
    f"stored_plan__{name}"
    for name in (
        "run_version",
        "resumable",
        "blocked",
        "drifted",
        "resume_money",
        "fresh_money",
        "resume_calls",
        "fresh_calls",
        "unsettled",
    )
)
# What a row reads of the event that stopped its run.
STOP_EVENT_FIELDS = ("run_id", "seq", "type", "stage", "payload", "created_at")


@dataclass(frozen=True)
class InboxFilters:
    status: str = ""
    pipeline: str = ""
    stage: str = ""
    run_pk: int | None = None
    # Only the runs of this notification (runs/notify.py).
    notice: int | None = None
    # A stops.ReasonKind: why the run needs a human.
    reason: str = ""

    def of_runs(self, through: str = "") -> Q:
        """What the filters keep of the runs (one run, a pipeline, a notification's), as a Q
        over a run's fields, or over a row's run `through` its relation ("run__"). The stage
        is each page's own: a run's current stage, a gate's own."""
        kept = Q()
        if self.run_pk is not None:
            kept &= Q(**{f"{through}pk": self.run_pk})
        if self.pipeline:
            kept &= Q(**{f"{through}pipeline": self.pipeline})
        if self.notice is not None:
            kept &= Q(**{f"{through}notices__notification_id": self.notice})
        return kept


@dataclass(frozen=True)
class StopFacts:
    """What an inbox row says about a run that needs a human: why (one sentence per line:
    the deviation, then the stop), since when, and the stored plan computed after the stop
    (None: no plan yet)."""

    why: list[str]
    stopped_at: datetime | None
    plan: StoredPlan | None
    # The run moved since its plan was computed (a ledger edit): a new one is on its way.
    plan_changed: bool = False
    # The gate a waiting run waits at (no plan: nothing broke, nothing to resume).
    gate: Gate | None = None
    # A blocked plan says what it waits for in place of its price (stops.blocked_sentence).
    blocked: str = ""
    # The run was resumed (or is an upgrade's branch) and stopped again (stops.resume_failed).
    resume_failed: str = ""


@dataclass
class InboxPage:
    # Each run needing a human carries `.stop`, a StopFacts.
    runs: list[Run]
    # The id of the last run shown, when there are more: the next page starts after it.
    next_after: int | None
    needs_human: int
    # Runs that need a human, per stops.ReasonKind, as its filter finds them (a run counts
    # under each reason it has: a blocked charge is also a failure).
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def by_reason(self) -> list[tuple[str, str, int]]:
        """(kind, short name, count) in the inbox's order of severity."""
        return [(kind, stops.SHORT[kind], self.counts.get(kind, 0)) for kind in stops.BY_SEVERITY]


def _ordering(filters: InboxFilters) -> list[tuple[str, bool]]:
    """(field, descending) pairs. Needs-a-human first (attention 0), the most severe first
    (Run.severity: waiting, blocked, deviated, failed, interrupted), then the most recently
    changed: run_inbox_idx (attention, severity, -updated_at, -id). With a status filter
    attention is constant and severity nearly so, so both are left out and the query walks
    run_status_idx (status, -updated_at, -id)."""
    order = [("updated_at", True), ("id", True)]
    return order if filters.status else [("attention", False), ("severity", False), *order]


def _after(order: list[tuple[str, bool]], after_pk: int) -> Q:
    """Rows strictly after run `after_pk` in `order` (keyset paging).

    The cursor row's values are compared inside the database (a subquery per column) rather
    than sent back as text: SQLite stores timestamps with millisecond text precision, and a
    value round-tripped through Python would not compare equal to itself."""

    def value(name: str):
        if name == "id":
            return after_pk
        return Subquery(Run.objects.filter(pk=after_pk).values(name)[:1])

    branches = []
    for i, (name, descending) in enumerate(order):
        equal = {prev: value(prev) for prev, _ in order[:i]}
        beyond = {f"{name}__{'lt' if descending else 'gt'}": value(name)}
        branches.append(Q(**equal, **beyond))
    return reduce(or_, branches)


def _reason_filter(kind: str) -> Q:
    """Runs that need a human for this reason. Every kind implies attention 0, said here too
    so the query walks run_inbox_idx from its attention=0 prefix; blocked and drifted read
    the stored plan joined by primary key, for runs that are stopped (a plan that a resume
    already acted on says nothing about the run now)."""
    stopped = Q(attention=0, status__in=Run.RESUMABLE)
    match kind:
        case ReasonKind.INTERRUPTED:
            return Q(attention=0, status=Run.Status.INTERRUPTED)
        case ReasonKind.FAILED:
            return Q(attention=0, status__in=(Run.Status.FAILED, Run.Status.NEEDS_APPROVAL))
        case ReasonKind.BLOCKED:
            return stopped & Q(stored_plan__blocked=True)
        case ReasonKind.DRIFTED:
            return stopped & Q(stored_plan__drifted=True)
        case ReasonKind.DEVIATED:
            return Q(attention=0, deviated=True)
        case ReasonKind.WAITING:
            return Q(attention=0, status=Run.Status.WAITING)
    raise ValueError(f"unknown reason kind {kind!r}")


def _filtered(filters: InboxFilters) -> QuerySet[Run]:
    runs = Run.objects.filter(filters.of_runs())
    if filters.reason:
        runs = runs.filter(_reason_filter(filters.reason))
    if filters.status:
        runs = runs.filter(status=filters.status)
    if filters.stage:
        runs = runs.filter(current_stage=filters.stage)
    return runs


def inbox_page(filters: InboxFilters, after: int | None, size: int = INBOX_PAGE_SIZE) -> InboxPage:
    """One page of runs, each with why it needs a human: three queries whatever the page
    holds (the runs with their stored plans, their stopping events, the needs-a-human count),
    and a fourth when waiting runs are on it (the gates they wait at)."""
    order = _ordering(filters)
    runs = _filtered(filters).select_related("stored_plan").only(*INBOX_FIELDS, *INBOX_PLAN_FIELDS)
    if after is not None:
        runs = runs.filter(_after(order, after))
    runs = runs.order_by(*[f"-{name}" if desc else name for name, desc in order])
    rows = list(runs[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    _attach_stops(rows)
    counts = reason_counts()
    return InboxPage(
        runs=rows,
        next_after=rows[-1].pk if more else None,
        needs_human=counts.pop("total"),
        counts=counts,
    )


def reason_counts() -> dict[str, int]:
    """How many runs need a human, in all ("total") and per reason kind, each counted by the
    reason's own filter so a count is what its link shows: one query over the attention=0
    prefix of run_inbox_idx, joined to the stored plans by primary key."""
    counts = {kind: Count("pk", filter=_reason_filter(kind)) for kind in ReasonKind.values}
    return Run.objects.filter(attention=0).aggregate(total=Count("pk"), **counts)


def new_since(filters: InboxFilters, since: datetime) -> int:
    """Runs the filters let through that came to need a human (or changed while needing
    one) after `since`: the inbox's "N new" notice, one count on run_inbox_idx."""
    return _filtered(filters).filter(attention=0, updated_at__gt=since).count()


def _newest_event_pk(types: tuple[str, ...]) -> Subquery:
    """The pk of the run's newest event of these types: a backward walk of the run's
    (run, seq) unique index that stops at the first match, a few rows from the end for a
    stopped run (its stop is among its last events)."""
    return Subquery(
        Event.objects.filter(run_id=OuterRef("pk"), type__in=types)
        .order_by("-seq")
        .values("pk")[:1]
    )


def stopping_events(runs: list[Run]) -> dict[int, dict[str, Event]]:
    """Per run, the event that stopped it ("stop", for runs a human resolves) and the one
    that recorded its deviation ("deviated", for deviated runs): one query for the page.

    Why read the events here rather than store the reason with the plan (the plan job reads
    the tail anyway): a reason belongs to the stop, not to the plan. The plan is computed
    later by a worker, or not at all when the queue is down, and a deviated run that went on
    to succeed has no plan job; the sentence would then be missing exactly when an operator
    needs it, or belong to an older stop. The stopping event is there the moment the run
    stops, and one query per page keeps the inbox's query count constant."""
    stopped = [run.pk for run in runs if run.is_resumable]
    deviated = [run.pk for run in runs if run.deviated]
    wanted = Q()
    if stopped:
        newest = _newest_event_pk(tuple(stops.STOPPING))
        wanted |= Q(pk__in=Run.objects.filter(pk__in=stopped).annotate(e=newest).values("e"))
    if deviated:
        newest = _newest_event_pk((Event.Type.PLAN_DEVIATED,))
        wanted |= Q(pk__in=Run.objects.filter(pk__in=deviated).annotate(e=newest).values("e"))
    if not wanted:
        return {}
    found: dict[int, dict[str, Event]] = {}
    for event in Event.objects.filter(wanted).only(*STOP_EVENT_FIELDS).order_by():
        kind = "deviated" if event.type == Event.Type.PLAN_DEVIATED else "stop"
        found.setdefault(event.run_id, {})[kind] = event
    return found


def _tool_of(pipeline: str, name: str) -> tuple[str, str]:
    """(policy, verb) of a pipeline's tool, from the registry in memory; ("", "call") for a
    tool or pipeline no longer registered."""
    try:
        tool = registry.get(pipeline).tool(name)
    except (UnknownPipeline, KeyError):
        return "", "call"
    return str(tool.policy), tool.verb


def _sentence(run: Run, event: Event, plan: StoredPlan | None) -> str:
    said = read(event)
    call, tool = str(getattr(said, "call", "") or ""), str(getattr(said, "tool", "") or "")
    policy, verb = _tool_of(run.pipeline, tool) if tool else ("", "call")
    planned = ""
    if plan is not None and call:
        planned = plan.unsettled.get(f"{event.stage}/{call}", stops.RESOLVED)
    return stops.sentence(
        event.type, event.stage, event.payload, policy=policy, verb=verb, planned=planned
    )


def _stored_plan(run: Run) -> StoredPlan | None:
    try:
        return run.stored_plan
    except StoredPlan.DoesNotExist:
        return None


def stop_facts(run: Run, events: dict[str, Event]) -> StopFacts:
    """Why `run` needs a human, from its stopping events and its stored plan."""
    stop = events.get("stop") if run.is_resumable else None
    deviation = events.get("deviated") if run.deviated else None
    plan = _stored_plan(run) if run.is_resumable else None
    # The plan counts only when computed after the stop: run.version moves with every append,
    # as seq does, so a plan at a version below the stop's seq is one of an earlier stop.
    if plan is not None and stop is not None and plan.run_version < stop.seq:
        plan = None
    resumed = run.is_resumable and run.was_resumed
    failed = stops.resume_failed(run.attempt, run.parent_id is not None) if resumed else ""
    why = [failed] if failed else []
    if deviation is not None:
        why.append(_sentence(run, deviation, None))
    # A deviation on a call the plan did not promise stops the run right after it; that
    # stop repeats the deviation.
    repeats = (
        deviation is not None
        and stop is not None
        and stop.type == Event.Type.NEEDS_APPROVAL
        and stop.seq == deviation.seq + 1
    )
    if stop is not None and not repeats:
        why.append(_sentence(run, stop, plan))
    moment = stop or deviation
    return StopFacts(
        why=why,
        stopped_at=moment.created_at if moment is not None else None,
        plan=plan,
        plan_changed=plan is not None and plan.run_version != run.version,
        blocked=stops.blocked_sentence(plan.unsettled) if plan is not None and plan.blocked else "",
        resume_failed=failed,
    )


def waiting_facts(run: Run, gate: Gate | None, events: dict[str, Event]) -> StopFacts:
    """Why a waiting run needs a human: the gate it waits at (and a deviation, if any)."""
    why = []
    deviation = events.get("deviated") if run.deviated else None
    if deviation is not None:
        why.append(_sentence(run, deviation, None))
    if gate is not None:
        why.append(
            stops.waiting_sentence(gate.stage, gate.gate_id, gate.kind, gate.role, gate.call)
        )
    return StopFacts(
        why=why,
        stopped_at=gate.created_at if gate is not None else None,
        plan=None,
        gate=gate,
    )


def _open_gates(runs: list[Run]) -> dict[int, Gate]:
    """The gate each waiting run of the page waits at: one query, none without one."""
    waiting = [run.pk for run in runs if run.is_waiting]
    if not waiting:
        return {}
    rows = Gate.objects.filter(run_id__in=waiting, status=GateStatus.OPEN).only(
        "id", "run_id", "stage", "gate_id", "kind", "role", "call", "seq", "created_at"
    )
    return {gate.run_id: gate for gate in rows.order_by("seq")}


def _attach_stops(runs: list[Run]) -> None:
    found = stopping_events(runs)
    gates = _open_gates(runs)
    known = set(registry.names())
    for run in runs:
        # A run of a pipeline this process does not load: its row says so.
        run.pipeline_known = run.pipeline in known
        events = found.get(run.pk, {})
        if run.attention != 0:
            run.stop = None
        elif run.is_waiting:
            run.stop = waiting_facts(run, gates.get(run.pk), events)
        else:
            run.stop = stop_facts(run, events)


def inbox_groups(filters: InboxFilters) -> grouping.Triage:
    """The inbox's runs that need a human, grouped by plan shape (runs/planning/grouping.py):
    the same filters as the list, so a notification's link (?notice=) shows that outage's
    groups."""
    return grouping.groups(_filtered(filters))


def stage_choices() -> list[str]:
    """Every stage of every registered pipeline, in pipeline order, once."""
    seen: list[str] = []
    for name in registry.names():
        for stage in registry.get(name).stage_names:
            if stage not in seen:
                seen.append(stage)
    return seen

"""Read-only queries behind the dashboard pages.

Every function here reads; none writes. Each page costs a fixed number of queries whatever
the number of runs or events: lists are paged on an index by keyset (never OFFSET), per-row
facts come from the row itself (the event count is `Run.last_seq`, not a COUNT over events),
and related rows are fetched in one query per kind.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import reduce
from operator import or_
from typing import Any

from django.core.files.storage import default_storage
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.http import Http404

from runs.dashboard import stops
from runs.dashboard.stops import ReasonKind
from runs.ledger import artifacts as artifact_store
from runs.ledger.payload_summary import summarize
from runs.models import Artifact, Checkpoint, Effect, Event, Run, StoredPlan
from runs.pipeline import Pipeline, UnknownPipeline, registry
from runs.planning import stored_plans, triage
from runs.planning.contract import Usage
from runs.planning.planner import Plan

INBOX_PAGE_SIZE = 50
TIMELINE_PAGE_SIZE = 100
# Enough to read a tool result on the page; the whole value is in the admin and the effect.
PAYLOAD_PREVIEW_CHARS = 4000
TEXT_PREVIEW_BYTES = 200_000

# --- Inbox -----------------------------------------------------------------------------------

# Columns the inbox shows; the JSON column (inputs) stays in the database.
INBOX_FIELDS = (
    "id",
    "pipeline",
    "status",
    "attention",
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


@dataclass
class InboxPage:
    # Each run needing a human carries `.stop`, a StopFacts.
    runs: list[Run]
    # The id of the last run shown, when there are more: the next page starts after it.
    next_after: int | None
    needs_human: int


def _ordering(filters: InboxFilters) -> list[tuple[str, bool]]:
    """(field, descending) pairs. Needs-a-human first (attention 0), then the most recently
    changed. With a status filter attention is constant, so it is left out and the query can
    walk run_status_idx (status, -updated_at, -id); otherwise run_inbox_idx."""
    order = [("updated_at", True), ("id", True)]
    return order if filters.status else [("attention", False), *order]


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
    raise ValueError(f"unknown reason kind {kind!r}")


def _filtered(filters: InboxFilters) -> QuerySet[Run]:
    runs = Run.objects.all()
    if filters.reason:
        runs = runs.filter(_reason_filter(filters.reason))
    if filters.run_pk is not None:
        runs = runs.filter(pk=filters.run_pk)
    if filters.status:
        runs = runs.filter(status=filters.status)
    if filters.pipeline:
        runs = runs.filter(pipeline=filters.pipeline)
    if filters.stage:
        runs = runs.filter(current_stage=filters.stage)
    if filters.notice is not None:
        runs = runs.filter(notices__notification_id=filters.notice)
    return runs


def inbox_page(filters: InboxFilters, after: int | None, size: int = INBOX_PAGE_SIZE) -> InboxPage:
    """One page of runs, each with why it needs a human: three queries whatever the page
    holds (the runs with their stored plans, their stopping events, the needs-a-human count)."""
    order = _ordering(filters)
    runs = _filtered(filters).select_related("stored_plan").only(*INBOX_FIELDS, *INBOX_PLAN_FIELDS)
    if after is not None:
        runs = runs.filter(_after(order, after))
    runs = runs.order_by(*[f"-{name}" if desc else name for name, desc in order])
    rows = list(runs[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    _attach_stops(rows)
    return InboxPage(
        runs=rows,
        next_after=rows[-1].pk if more else None,
        # An index-only count of the attention=0 prefix of run_inbox_idx.
        needs_human=Run.objects.filter(attention=0).count(),
    )


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
    payload = event.payload if isinstance(event.payload, dict) else {}
    shown = payload.get("summary", payload) if "stored_as" in payload else payload
    call, tool = str(shown.get("call") or ""), str(shown.get("tool") or "")
    policy, verb = _tool_of(run.pipeline, tool) if tool else ("", "call")
    planned = ""
    if plan is not None and call:
        planned = plan.unsettled.get(f"{event.stage}/{call}", stops.RESOLVED)
    return stops.sentence(
        event.type, event.stage, payload, policy=policy, verb=verb, planned=planned
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
    why = []
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
    )


def _attach_stops(runs: list[Run]) -> None:
    found = stopping_events(runs)
    for run in runs:
        run.stop = stop_facts(run, found.get(run.pk, {})) if run.attention == 0 else None


def inbox_groups(filters: InboxFilters) -> triage.Triage:
    """The inbox's runs that need a human, grouped by plan shape (runs/triage.py): the same
    filters as the list, so a notification's link (?notice=) shows that outage's groups."""
    return triage.groups(_filtered(filters))


def stage_choices() -> list[str]:
    """Every stage of every registered pipeline, in pipeline order, once."""
    seen: list[str] = []
    for name in registry.names():
        for stage in registry.get(name).stage_names:
            if stage not in seen:
                seen.append(stage)
    return seen


# --- One run ---------------------------------------------------------------------------------


def get_run(pk: int) -> Run:
    run = Run.objects.select_related("lease", "parent", "branch_checkpoint").filter(pk=pk).first()
    if run is None:
        raise Http404(f"There is no run-{pk}.")
    return run


@dataclass
class Step:
    stage: str
    # verified | running | stopped | pending
    state: str


@dataclass
class Progress:
    steps: list[Step]
    verified: int

    @property
    def total(self) -> int:
        return len(self.steps)


def progress(run: Run, checkpoint_stages: set[str] | None = None) -> Progress:
    """The pipeline's stages with what this run has verified, and where it is now."""
    try:
        stage_names = registry.get(run.pipeline).stage_names
    except UnknownPipeline:
        stage_names = ()
    if checkpoint_stages is None:
        checkpoint_stages = set(
            Checkpoint.objects.filter(run=run).values_list("stage", flat=True).distinct()
        )
    done = set(checkpoint_stages)
    point = run.branch_checkpoint
    if point is not None and point.stage in stage_names:
        # A branch inherits every stage up to its branch point.
        done |= set(stage_names[: stage_names.index(point.stage) + 1])
    if run.status == Run.Status.SUCCEEDED:
        done = set(stage_names)
    steps = []
    for name in stage_names:
        if name in done and not (name == run.current_stage and run.is_active):
            state = "verified"
        elif name == run.current_stage and run.is_active:
            state = "running"
        elif name == run.current_stage and run.is_resumable:
            state = "stopped"
        else:
            state = "pending"
        steps.append(Step(name, state))
    return Progress(steps, sum(1 for s in steps if s.state == "verified"))


@dataclass
class TimelinePage:
    run: Run
    events: list[Event]
    # None means "the latest events" (the live view); a number is a fixed page of seq > after.
    after: int | None
    older_after: int | None
    newer_after: int | None
    # Events up to this seq are settled history: they end at the checkpoint a resume would
    # build on (`settled_checkpoint`), so the page shows them collapsed. 0 = nothing settled.
    settled_until: int = 0
    settled_checkpoint: str = ""

    @property
    def settled(self) -> list[Event]:
        return [e for e in self.events if e.seq <= self.settled_until]

    @property
    def unsettled(self) -> list[Event]:
        return [e for e in self.events if e.seq > self.settled_until]

    @property
    def live(self) -> bool:
        """Poll while the run can still append events to what this page shows."""
        return self.run.is_active and self.newer_after is None


def timeline(run: Run, after: int | None, size: int = TIMELINE_PAGE_SIZE) -> TimelinePage:
    """One page of the event log by seq (the (run, seq) unique index), oldest first.

    Seqs are contiguous (the append path assigns last_seq + 1), so the previous page simply
    starts `size` earlier."""
    start = max(run.last_seq - size, 0) if after is None else max(after, 0)
    rows = list(
        Event.objects.filter(run=run, seq__gt=start)
        .defer("hash", "prev_hash", "token")
        .order_by("seq")[: size + 1]
    )
    newer = rows[size - 1].seq if len(rows) > size else None
    for event in rows:
        event.shown = shown_payload(event)
    return TimelinePage(
        run=run,
        events=rows[:size],
        after=after,
        older_after=max(start - size, 0) if start > 0 else None,
        newer_after=newer,
    )


def shown_payload(event: Event) -> dict[str, Any]:
    """What the event's timeline row reads of its payload, however the payload is stored:
    inline, or as an artifact with a summary beside the reference."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    if not event.payload_ref:
        return payload
    if "summary" in payload:
        return payload["summary"]
    if event.type == Event.Type.LEDGER_EDITED:
        # Stored before events kept a summary: who changed what, and why, must still show,
        # so it is read from the artifact. Edits are rare; a page holds few of them.
        try:
            stored = json.loads(artifact_store.read(event.payload_ref))
        except (artifact_store.ArtifactMissing, ValueError):
            return {}
        return summarize(stored) if isinstance(stored, dict) else {}
    return {}


@dataclass
class ArtifactRow:
    stage: str
    checkpoint: str
    name: str
    uri: str
    sha256: str
    size: int
    content_type: str
    artifact: Artifact | None
    ok: bool
    reason: str = ""


def _verify_row(uri: str, expected: str, artifact: Artifact | None) -> tuple[bool, str]:
    """runs.artifacts.verify() on a row this page already loaded: the same three checks (the
    row exists, it records the manifest's hash, its blob still hashes to it) without a query
    per artifact. The artifact's own page calls artifacts.verify() itself."""
    if artifact is None:
        return False, f"{uri} is not in the artifact table"
    if artifact.sha256 != expected:
        return False, f"{uri} is recorded with a different sha256 than the manifest"
    try:
        with default_storage.open(artifact.blob, "rb") as handle:
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError as exc:
        return False, f"{uri}: blob {artifact.blob} is gone ({exc})"
    if digest != expected:
        return False, f"{uri} was altered: its blob hashes to {digest[:12]}…"
    return True, ""


def artifact_rows(checkpoints: list[Checkpoint]) -> list[ArtifactRow]:
    entries = [(cp, entry) for cp in checkpoints for entry in cp.artifacts]
    wanted = []
    for _, entry in entries:
        try:
            wanted.append(artifact_store.parse_uri(entry.get("uri", "")))
        except artifact_store.ArtifactMissing:
            continue
    found: dict[tuple[str, int], Artifact] = {}
    if wanted:
        query = reduce(or_, (Q(name=name, version=version) for name, version in wanted))
        found = {(a.name, a.version): a for a in Artifact.objects.filter(query)}
    rows = []
    for cp, entry in entries:
        uri = entry.get("uri", "")
        try:
            artifact = found.get(artifact_store.parse_uri(uri))
        except artifact_store.ArtifactMissing:
            artifact = None
        ok, reason = _verify_row(uri, entry.get("sha256", ""), artifact)
        rows.append(
            ArtifactRow(
                stage=cp.stage,
                checkpoint=cp.id,
                name=entry.get("name", ""),
                uri=uri,
                sha256=entry.get("sha256", ""),
                size=entry.get("size", 0),
                content_type=entry.get("content_type", ""),
                artifact=artifact,
                ok=ok,
                reason=reason,
            )
        )
    return rows


@dataclass
class RunFacts:
    checkpoints: list[Checkpoint]
    artifacts: list[ArtifactRow]
    effects: list[Effect]

    @property
    def checkpoint_stages(self) -> set[str]:
        return {cp.stage for cp in self.checkpoints}


def run_facts(run: Run) -> RunFacts:
    """What the run has verified, stored and done outside: one query per kind."""
    checkpoints = list(Checkpoint.objects.filter(run=run).order_by("last_seq"))
    return RunFacts(
        checkpoints=checkpoints,
        artifacts=artifact_rows(checkpoints),
        effects=list(Effect.objects.filter(run=run).order_by("id")),
    )


@dataclass
class RunPage:
    run: Run
    progress: Progress
    timeline: TimelinePage
    facts: RunFacts
    branches: list[Run]
    # The stored plan of a run a human can resume (pages never compute one: a plan asks
    # targets reconcile questions), with its row: when it was computed, and whether the run
    # moved since.
    plan: Plan | None = None
    stored_plan: StoredPlan | None = None
    # The verdict on the latest approved plan (PLAN_KEPT / PLAN_DEVIATED), if the resumed
    # work reached one.
    verdict: Verdict | None = None


def resume_point(plan: Plan | None) -> tuple[str, int]:
    """The checkpoint a resume would build on and the seq of the event that sealed it, when
    that checkpoint is the run's own ("", 0 otherwise): the history up to it is settled.
    The plan's tail is every event after that seq (seq has no gaps)."""
    if plan is None or not plan.checkpoint:
        return "", 0
    seq = plan.last_seq - plan.tail_events
    return (plan.checkpoint, seq) if seq > 0 else ("", 0)


def run_page(run: Run, after: int | None) -> RunPage:
    facts = run_facts(run)
    shown = _shown_plan(run)
    page = timeline(run, after)
    page.settled_checkpoint, page.settled_until = resume_point(shown.get("plan"))
    return RunPage(
        run=run,
        progress=progress(run, facts.checkpoint_stages),
        timeline=page,
        facts=facts,
        branches=list(
            run.branches.only(
                "id", "status", "current_stage", "created_at", "branch_checkpoint"
            ).order_by("id")
        ),
        **shown,
        verdict=verdict(run),
    )


def _shown_plan(run: Run) -> dict[str, Any]:
    shown = stored_plans.shown(run) if run.is_resumable else None
    if shown is None:
        return {}
    return {"plan": shown[0], "stored_plan": shown[1]}


@dataclass(frozen=True)
class Verdict:
    kept: bool
    seq: int
    fingerprint: str
    mode: str
    promised: Usage
    used: Usage
    reason: str

    @property
    def summary(self) -> str:
        used = self.used
        calls = f"{used.tool_calls} call{'s' if used.tool_calls != 1 else ''}"
        if self.kept:
            return f"Plan kept: {calls}, ${used.money.quantize(Decimal('0.0001'))}, as approved"
        promised = self.promised
        return (
            f"Plan deviated: {self.reason or 'the resumed work departed from the plan'} "
            f"(approved: {promised.tool_calls} calls, "
            f"${promised.money.quantize(Decimal('0.0001'))}; so far: {calls}, "
            f"${used.money.quantize(Decimal('0.0001'))})"
        )


def verdict(run: Run) -> Verdict | None:
    """The newest verdict event of the run: one indexed read from the end of its log."""
    if run.attempt == 0 and run.parent_id is None:
        return None  # never approved: no plan to keep
    row = (
        Event.objects.filter(run=run, type__in=(Event.Type.PLAN_KEPT, Event.Type.PLAN_DEVIATED))
        .order_by("-seq")
        .values_list("seq", "type", "payload")
        .first()
    )
    if row is None:
        return None
    seq, type_, payload = row
    return Verdict(
        kept=type_ == Event.Type.PLAN_KEPT,
        seq=seq,
        fingerprint=payload.get("fingerprint", ""),
        mode=payload.get("mode", ""),
        promised=Usage.from_dict(payload.get("promised")),
        used=Usage.from_dict(payload.get("used")),
        reason=payload.get("reason", ""),
    )


@dataclass
class TimelineUpdate:
    """What one poll of the timeline sends: the page of events and the header; once the run
    stops being live, also its facts, so the whole page agrees without a reload."""

    run: Run
    timeline: TimelinePage
    progress: Progress
    facts: RunFacts | None


def timeline_update(run: Run, after: int | None) -> TimelineUpdate:
    page = timeline(run, after)
    facts = None if page.live else run_facts(run)
    stages = facts.checkpoint_stages if facts is not None else None
    return TimelineUpdate(run, page, progress(run, stages), facts)


# --- Pipelines -------------------------------------------------------------------------------


def get_pipeline(name: str) -> Pipeline:
    try:
        return registry.get(name)
    except UnknownPipeline as exc:
        raise Http404(f"There is no pipeline {name!r}.") from exc


# --- Artifacts -------------------------------------------------------------------------------


def get_artifact(pk: int) -> Artifact:
    artifact = Artifact.objects.select_related("run").filter(pk=pk).first()
    if artifact is None:
        raise Http404(f"There is no artifact {pk}.")
    return artifact


@dataclass
class ArtifactView:
    artifact: Artifact
    check: artifact_store.Check
    text: str | None
    truncated: bool


def artifact_view(artifact: Artifact) -> ArtifactView:
    check = artifact_store.verify(artifact.uri, artifact.sha256)
    text, truncated = None, False
    if artifact.is_text and check.ok:
        data = artifact_store.read(artifact.uri)
        truncated = len(data) > TEXT_PREVIEW_BYTES
        text = data[:TEXT_PREVIEW_BYTES].decode("utf-8", errors="replace")
    return ArtifactView(artifact, check, text, truncated)

"""One run's page: its progress, the timeline of its events, what it verified, stored and
did outside, its stored plan, and the verdict on the plan it was resumed with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runs.events import read
from runs.gates import recorded
from runs.models import Checkpoint, Effect, Event, Gate, Run, StageLog, StoredPlan
from runs.pipeline import UnknownPipeline, registry
from runs.planning import stored_plans
from runs.planning.planner import Plan
from runs.reads.artifacts import ArtifactRow, artifact_rows
from runs.reads.decision import Decision, decision
from runs.reads.gates import open_gate_of
from runs.reads.spend import RunSpend, run_spend
from runs.reads.verdicts import PlanVerdict, verdict

TIMELINE_PAGE_SIZE = 100
# The newest stage logs the page lists: a run stops and is resumed a few times at most.
STAGE_LOGS_SHOWN = 10


def get_run(pk: int) -> Run | None:
    return Run.objects.select_related("lease", "parent", "branch_checkpoint").filter(pk=pk).first()


@dataclass
class Step:
    stage: str
    # verified | running | stopped | pending
    state: str


@dataclass
class Progress:
    steps: list[Step]
    verified: int
    # The run's pipeline is not registered in this process (RESUMER_PIPELINES): its stages
    # cannot be listed, and nothing of it can be planned or resumed here.
    unknown_pipeline: bool = False

    @property
    def total(self) -> int:
        return len(self.steps)


def progress(run: Run, checkpoint_stages: set[str] | None = None) -> Progress:
    """The pipeline's stages with what this run has verified, and where it is now."""
    try:
        stage_names = registry.get(run.pipeline).stage_names
    except UnknownPipeline:
        return Progress([], 0, unknown_pipeline=True)
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

    # How often the newest page asks again ("2s", "5s"), or "" when the run is finished
    # (timeline_poll): a stopped run is followed too, through its plan, its approval and
    # the resumed work, up to its verdict.
    poll: str = ""

    @property
    def live(self) -> bool:
        """Poll while the run can still move: the newest page of a run that is not done."""
        return bool(self.poll) and self.newer_after is None

    # What the page's poll form says back (runs/reads/live.py): its last event's seq, the
    # lease heartbeat its header shows, whether it follows an active run, its last table.
    @property
    def until(self) -> int:
        return self.events[-1].seq if self.events else 0

    @property
    def beat(self) -> int:
        return heartbeat(self.run)

    @property
    def follows(self) -> str:
        return "active" if self.run.is_active else "stopped"

    @property
    def tail(self) -> int:
        """The first seq of the page's last stage table (0: none after the settled history)."""
        return table_start(self.unsettled)

    @property
    def total(self) -> int:
        """The events the run has: its head, or the newest event read when the run moved
        between the two reads (never "#1–#3 of 2")."""
        last = self.events[-1].seq if self.events else 0
        return max(self.run.last_seq, last)


def table_start(events: list[Event]) -> int:
    """The seq of the first event of the last stage table these events are drawn as."""
    start = 0
    for event in reversed(events):
        if event.stage != events[-1].stage:
            break
        start = event.seq
    return start


def heartbeat(run: Run) -> int:
    """The lease's last heartbeat in milliseconds since the epoch (0: none): the header shows
    it, so a live page's poll brings the header again when it moved (runs/reads/live.py)."""
    lease = getattr(run, "lease", None)
    at = lease.heartbeat_at if lease is not None else None
    return int(at.timestamp() * 1000) if at is not None else 0


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
        # What the row shows: the payload, or a stored one's summary (runs/events.py).
        event.shown = read(event)
    return TimelinePage(
        run=run,
        events=rows[:size],
        after=after,
        older_after=max(start - size, 0) if start > 0 else None,
        newer_after=newer,
        poll=timeline_poll(run),
    )


def timeline_poll(run: Run, plan_pending: bool = False) -> str:
    """How often the run page asks for news: every 2 s while a worker moves the run or its
    stop's plan is being computed; every 5 s while it waits for a human (an approval, a
    gate's answer, an edit may come from elsewhere); never once it is done."""
    if run.is_active or plan_pending:
        return "2s"
    if run.is_resumable or run.is_waiting:
        return "5s"
    return ""


@dataclass
class RunFacts:
    checkpoints: list[Checkpoint]
    artifacts: list[ArtifactRow]
    effects: list[Effect]
    # What its model calls consumed: tokens and money per call, per stage and in all.
    spend: RunSpend

    @property
    def checkpoint_stages(self) -> set[str]:
        return {cp.stage for cp in self.checkpoints}


def run_facts(run: Run) -> RunFacts:
    """What the run has verified, stored and done outside: one query per kind, and one for
    the confirmations that say which effects a reviewer edited, one for its model calls."""
    checkpoints = list(Checkpoint.objects.filter(run=run).order_by("last_seq"))
    return RunFacts(
        checkpoints=checkpoints,
        artifacts=artifact_rows(checkpoints),
        effects=edited_effects(run, list(Effect.objects.filter(run=run).order_by("id"))),
        spend=run_spend(run),
    )


def edited_effects(run: Run, effects: list[Effect]) -> list[Effect]:
    """The effects, each with `.edited`: for a call made with a reviewer's edits, what changed
    and the price asked ("amount 5.00 → 20.00, by sam (asked at $5.00)"), as the plan says
    it; "" for the others. The row itself holds what was sent and what it cost."""
    approved = recorded.approved_calls(run) if effects else {}
    for effect in effects:
        effect.edited = recorded.edited(approved.get((effect.stage, effect.call_id)), effect)
    return effects


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
    verdict: PlanVerdict | None = None
    # The gate a waiting run waits at: the page links to it.
    gate: Gate | None = None
    # Both options with their cost and consequences, blockers, plan pending, worker silence.
    decision: Decision | None = None
    # What the run's failed, stopped or interrupted stage jobs logged; None when the reader
    # may not see them (viewers: logs may hold sensitive data).
    stage_logs: list[StageLog] | None = None

    @property
    def state(self) -> str:
        return page_state(self.run, self.stored_plan)

    @property
    def log_flush_seconds(self) -> int:
        """How much of an interrupted stage's log may be missing (the page says it)."""
        return StageLog.FLUSH_SECONDS


def page_state(run: Run, stored: StoredPlan | None) -> str:
    """What the page's decision was rendered from: the run's version and the stored plan's
    time. A poll that sends the same one back gets no new decision (the operator's ticked
    box stays ticked)."""
    computed = int(stored.computed_at.timestamp() * 1000) if stored is not None else 0
    return f"{run.version}-{computed}"


def resume_point(plan: Plan | None) -> tuple[str, int]:
    """The checkpoint a resume would build on and the seq of the event that sealed it, when
    that checkpoint is the run's own ("", 0 otherwise): the history up to it is settled.
    The plan's tail is every event after that seq (seq has no gaps)."""
    if plan is None or not plan.checkpoint:
        return "", 0
    seq = plan.last_seq - plan.tail_events
    return (plan.checkpoint, seq) if seq > 0 else ("", 0)


def stage_logs(run: Run) -> list[StageLog]:
    """The run's kept stage logs, newest job first: read backwards on the (run, token)
    unique index. Only jobs that left the run for a human keep one (stage_log.py)."""
    return list(StageLog.objects.filter(run=run).order_by("-token")[:STAGE_LOGS_SHOWN])


def run_page(run: Run, after: int | None, *, logs: bool = False) -> RunPage:
    facts = run_facts(run)
    shown = _shown_plan(run)
    page = timeline(run, after)
    page.settled_checkpoint, page.settled_until = resume_point(shown.get("plan"))
    found = decision(run, shown.get("plan"), shown.get("stored_plan"), facts.effects)
    page.poll = timeline_poll(run, found.plan_pending)
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
        gate=open_gate_of(run),
        decision=found,
        stage_logs=stage_logs(run) if logs else None,
    )


def _shown_plan(run: Run) -> dict[str, Any]:
    shown = stored_plans.shown(run) if run.is_resumable else None
    if shown is None:
        return {}
    return {"plan": shown[0], "stored_plan": shown[1]}


@dataclass
class TimelineUpdate:
    """What one poll of the timeline sends: the page of events and the header; when what the
    decision was rendered from changed (`changed`), also the decision, the plan, the verdict
    and (once the run stopped) its facts, so the whole page follows the run without a reload.
    An unchanged stopped run's decision is not sent again: a ticked box stays ticked."""

    page: RunPage
    changed: bool

    @property
    def run(self) -> Run:
        return self.page.run


def timeline_update(
    run: Run,
    after: int | None,
    seen: str,
    *,
    logs: bool = False,
    news: Callable[[int, str], TimelinePage | None] | None = None,
) -> TimelineUpdate:
    """`news(settled_until, poll)`: a live page's poll asks for only what came after its last
    event (runs/reads/live.py), or None when the page must be drawn again: the latest page."""
    shown = _shown_plan(run)
    changed = seen != page_state(run, shown.get("stored_plan"))
    facts = run_facts(run) if changed and not run.is_active else None
    effects = facts.effects if facts is not None else None
    checkpoint, settled = resume_point(shown.get("plan"))
    found = decision(run, shown.get("plan"), shown.get("stored_plan"), effects)
    poll = timeline_poll(run, found.plan_pending)
    page = news(settled, poll) if news is not None else None
    if page is None:
        page = timeline(run, after)
    page.settled_checkpoint, page.settled_until, page.poll = checkpoint, settled, poll
    stages = facts.checkpoint_stages if facts is not None else None
    update = RunPage(
        run=run,
        progress=progress(run, stages),
        timeline=page,
        facts=facts,  # type: ignore[arg-type]
        branches=[],
        **shown,
        verdict=verdict(run),
        gate=open_gate_of(run),
        decision=found,
        # Sent with the facts, once the run stopped: what its last job logged is stored by then.
        stage_logs=stage_logs(run) if logs and facts is not None else None,
    )
    return TimelineUpdate(update, changed)

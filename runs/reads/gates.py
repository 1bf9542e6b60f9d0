"""Gates as the pages show them: the inbox's "Waiting for a decision", one gate's page (the
question, what the stage verified before it, the pending call, the gate's history), and the
open gates of one shape answered together.

Reads only. A gate's page costs a fixed number of queries for its pipeline: the gate with its
run, the upstream checkpoints (one per stage before the gate's), their artifacts, the gate's
events and the count of gates like it."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count

from runs.events import HumanAnswered, read
from runs.gates.acts import act_of
from runs.gates.decision import gate_digest
from runs.ledger import artifacts as artifact_store
from runs.ledger.checkpoints import latest_checkpoint
from runs.models import Checkpoint, Event, Gate, GateStatus, Run
from runs.pipeline import UnknownPipeline, registry
from runs.reads.artifacts import ArtifactRow, artifact_rows
from runs.reads.inbox import InboxFilters
from runs.reads.stops import ReasonKind

WAITING_LIMIT = 50
GROUP_LIMIT = 200
HISTORY_LIMIT = 50
# A text artifact shown inline on a gate's page (the draft): enough to review, bounded.
TEXT_PREVIEW_BYTES = 100_000
# What an inbox row reads of a gate; the form, its initial values and the votes stay behind.
GATE_ROW_FIELDS = (
    "id",
    "run_id",
    "stage",
    "gate_id",
    "kind",
    "question",
    "role",
    "quorum",
    "deadline",
    "call",
    "shape",
    "status",
    "created_at",
    "run__pipeline",
    "run__status",
)


# --- The inbox's "Waiting for a decision" ----------------------------------------------------


@dataclass
class Waiting:
    # Oldest first; each gate carries `.alike`: the open gates of its shape (itself included).
    gates: list[Gate]
    total: int


def _open_gates(filters: InboxFilters):
    gates = Gate.objects.filter(filters.of_runs(through="run__"), status=GateStatus.OPEN)
    return gates.filter(stage=filters.stage) if filters.stage else gates


def waiting(filters: InboxFilters, limit: int = WAITING_LIMIT) -> Waiting | None:
    """The open gates the inbox's filters let through, oldest first (gate_open_idx), with how
    many open gates share each one's shape: two queries, three past `limit`. None when the
    filters ask for runs that cannot be waiting."""
    if filters.reason not in ("", ReasonKind.WAITING):
        return None
    if filters.status not in ("", Run.Status.WAITING):
        return None
    gates = _open_gates(filters)
    rows = list(
        gates.on_db_clock()
        .select_related("run")
        .only(*GATE_ROW_FIELDS)
        .order_by("created_at", "pk")[: limit + 1]
    )
    total = len(rows) if len(rows) <= limit else gates.count()
    rows = rows[:limit]
    alike = alike_counts({g.shape for g in rows})
    for gate in rows:
        gate.alike = alike.get(gate.shape, 1)
    return Waiting(gates=rows, total=total)


def alike_counts(shapes: set[str]) -> dict[str, int]:
    """Open gates per shape, for these shapes: one query (gate_shape_idx)."""
    if not shapes:
        return {}
    return dict(
        Gate.objects.filter(status=GateStatus.OPEN, shape__in=shapes)
        .order_by()
        .values_list("shape")
        .annotate(n=Count("pk"))
    )


def open_gate_of(run: Run) -> Gate | None:
    """The gate a waiting run waits at (a run waits at one gate at a time)."""
    if not run.is_waiting:
        return None
    return (
        Gate.objects.on_db_clock().filter(run=run, status=GateStatus.OPEN).order_by("-seq").first()
    )


# --- One gate's page -------------------------------------------------------------------------


def get_gate(run_pk: int, gate_pk: int) -> Gate | None:
    """The gate, if it is this run's; whether it is overdue is read on the database's clock,
    as an answer is held against it."""
    return (
        Gate.objects.on_db_clock()
        .select_related("run", "run__lease")
        .filter(pk=gate_pk, run_id=run_pk)
        .first()
    )


@dataclass
class ShownArtifact:
    row: ArtifactRow
    # A text artifact that still verifies, read for the page (the draft); None otherwise.
    text: str | None = None
    truncated: bool = False

    @property
    def is_image(self) -> bool:
        return bool(self.row.artifact and self.row.ok and self.row.artifact.is_image)


@dataclass
class Upstream:
    """A stage before the gate's, as the gate's stage sees it: its latest verified checkpoint,
    its outputs and its artifacts."""

    stage: str
    checkpoint: Checkpoint
    artifacts: list[ShownArtifact] = field(default_factory=list)

    @property
    def outputs(self) -> dict[str, Any]:
        return self.checkpoint.outputs

    @property
    def shows_work(self) -> bool:
        """Whether it holds what a reviewer looks at (an image, a text that is not data):
        the page opens it."""
        return any(
            a.is_image or (a.text is not None and a.row.content_type.startswith("text/"))
            for a in self.artifacts
        )


@dataclass
class HistoryLine:
    seq: int
    # "opened", "reopened" or "answered"
    kind: str
    by: str
    at: datetime
    answer: dict[str, Any] | None = None
    diff: dict[str, Any] = field(default_factory=dict)
    final: bool = False
    votes: int = 0
    # The answer its deadline recorded (on_timeout's default): the gate's, and not a vote.
    timed_out: bool = False


@dataclass
class GatePage:
    gate: Gate
    run: Run
    upstream: list[Upstream]
    history: list[HistoryLine]
    # Open gates of the same shape, this one included (more than one: answer them together).
    alike: int


def _stages_before(run: Run, stage: str) -> list[str]:
    try:
        names = list(registry.get(run.pipeline).stage_names)
    except UnknownPipeline:
        return []
    return names[: names.index(stage)] if stage in names else []


def _read_text(row: ArtifactRow) -> ShownArtifact:
    if not (row.artifact and row.ok and row.artifact.is_text):
        return ShownArtifact(row)
    try:
        data = artifact_store.read_verified(row.uri, row.sha256)
    except artifact_store.ArtifactMissing:
        return ShownArtifact(row)
    text = data[:TEXT_PREVIEW_BYTES].decode("utf-8", errors="replace")
    return ShownArtifact(row, text, len(data) > TEXT_PREVIEW_BYTES)


def upstream(run: Run, stage: str) -> list[Upstream]:
    """The verified checkpoints the gate's stage builds on (its own run's, or on a branch
    those its branch point inherits), in pipeline order, with their artifacts checked against
    their manifests and text artifacts read."""
    found = []
    for name in _stages_before(run, stage):
        checkpoint = latest_checkpoint(run, name)
        if checkpoint is not None:
            found.append(checkpoint)
    rows = artifact_rows(found)
    return [
        Upstream(cp.stage, cp, [_read_text(r) for r in rows if r.checkpoint == cp.id])
        for cp in found
    ]


# The events that (re)open a gate, and the kind of history line each is.
OPENING = {Event.Type.GATE_OPENED: "opened", Event.Type.GATE_REOPENED: "reopened"}


def history(gate: Gate) -> list[HistoryLine]:
    """The gate's GATE_OPENED (or, asked again, its GATE_REOPENED: the refused attempts
    before it are on the row) and the HUMAN_ANSWERED events after it, up to the run's next
    gate: a run waits at one gate at a time, so every answer in between is this gate's. An
    answer too large to keep inline is read from the gate's row (its votes, its answer)."""
    events = list(
        Event.objects.filter(
            run_id=gate.run_id,
            seq__gte=gate.seq,
            type__in=(*OPENING, Event.Type.HUMAN_ANSWERED),
        )
        .only("seq", "type", "actor", "payload", "payload_ref", "created_at")
        .order_by("seq")[:HISTORY_LIMIT]
    )
    lines: list[HistoryLine] = []
    for event in events:
        if event.type in OPENING:
            if lines:
                break  # the run's next gate
            lines.append(HistoryLine(event.seq, OPENING[event.type], event.actor, event.created_at))
            continue
        lines.append(_answered(gate, event, len(lines) - 1))
    return lines


def _answered(gate: Gate, event: Event, vote: int) -> HistoryLine:
    said = _from_row(gate, event, vote) if event.payload_ref else read(event)
    return HistoryLine(
        seq=event.seq,
        kind="answered",
        by=str(said.by or event.actor),
        at=event.created_at,
        answer=said.answer if isinstance(said.answer, dict) else None,
        diff=said.diff if isinstance(said.diff, dict) else {},
        final=bool(said.final),
        votes=int(said.votes or 0),
        timed_out=bool(said.timed_out),
    )


def _from_row(gate: Gate, event: Event, vote: int) -> HumanAnswered:
    """An answer too large to keep inline, as the gate's row holds it (its votes, its
    answer), without reading the artifact."""
    stored = gate.votes[vote] if vote < len(gate.votes) else {}
    final = event.seq == gate.answer_seq
    timed_out = final and vote >= len(gate.votes)
    return HumanAnswered(
        gate=gate.gate_id,
        kind=gate.kind,
        subject=gate.subject,
        by=stored.get("by", event.actor),
        answer=gate.answer if timed_out else stored.get("answer"),
        diff=gate.diff if final else {},
        final=final,
        votes=len(gate.votes) if timed_out else vote + 1,
        quorum=gate.quorum,
        timed_out=timed_out,
    )


def gate_page(gate: Gate) -> GatePage:
    return GatePage(
        gate=gate,
        run=gate.run,
        upstream=upstream(gate.run, gate.stage),
        history=history(gate),
        alike=alike_counts({gate.shape}).get(gate.shape, 0) if gate.is_open else 0,
    )


# --- A diff, as the preview and the history show it ------------------------------------------


@dataclass
class DiffLine:
    name: str
    before: Any
    after: Any
    # For text over a line: the unified diff's lines ("+...", "-...", " ...").
    lines: list[str] = field(default_factory=list)


def diff_lines(diff: dict[str, Any]) -> list[DiffLine]:
    """{name: [shown, answered]} (runs/gates/forms.diff) as rows; multi-line text as a line
    diff, so an edited paragraph of a long body is found at once."""
    shown = []
    for name, pair in sorted(diff.items()):
        before, after = (list(pair) + [None, None])[:2] if isinstance(pair, list) else (None, pair)
        lines: list[str] = []
        if isinstance(before, str) and isinstance(after, str) and "\n" in before + after:
            lines = [
                line.rstrip("\n")
                for line in difflib.unified_diff(
                    before.splitlines(), after.splitlines(), "shown", "answered", n=1, lineterm=""
                )
            ][2:]
        shown.append(DiffLine(str(name), before, after, lines))
    return shown


# --- Identical gates, answered together ------------------------------------------------------


def _with_acts(gates: list[Gate]) -> list[Gate]:
    # Each row's pending call as an act ("charges $5.00 to acct-42 (card)") and the digest
    # of what the row shows, which the page's answer carries back.
    for gate in gates:
        gate.act = act_of(gate.call)
        gate.digest = gate_digest(gate)
    return gates


def gate_group(shape: str, limit: int = GROUP_LIMIT) -> list[Gate] | None:
    """The open gates of one shape, oldest first (gate_shape_idx), each with its run; None
    when none is open."""
    rows = list(
        Gate.objects.filter(shape=shape, status=GateStatus.OPEN)
        .select_related("run")
        .order_by("created_at", "pk")[:limit]
    )
    return _with_acts(rows) or None


def gates_of_shape(shape: str, pks: list[int]) -> list[Gate]:
    """The gates a bulk answer's page showed that are of this shape, open or not, in the
    page's order: what the answer's form was offered from."""
    found = {g.pk: g for g in Gate.objects.filter(pk__in=pks, shape=shape).select_related("run")}
    return _with_acts([found[pk] for pk in pks if pk in found])


def gates_by_pk(pks: list[int]) -> dict[int, Gate]:
    """What a bulk answer's result names: the gates it answered or skipped, with their runs."""
    return {g.pk: g for g in Gate.objects.filter(pk__in=pks).select_related("run")}

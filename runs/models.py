"""The run ledger: runs, their append-only events, verified checkpoints, the effect ledger,
content-addressed artifacts and the single-writer lease.

Rules about one row's state live here. Flows that touch several rows live in plain modules:
`append.py` (the one append path), `effects.py`, `checkpoints.py`, `edits.py`, `leases.py`,
`engine.py`, `planner.py`, `resume.py`.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import models
from django.db.models import F
from django.db.models.functions import Now
from django.db.models.lookups import In
from django.utils import timezone

from runs import ids


@models.CharField.register_lookup
class OneOf(In):
    """`field__one_of=[...]`: IN, but on PostgreSQL `= ANY` of one array constant. The hot
    tables' CHECK constraints say their vocabularies this way: PostgreSQL evaluates every CHECK
    of a row it writes, and an IN list is stored as one constant per value, which it reads
    back and folds into an array again in every statement (a tenth of the server's work on a
    tool call's two statements, issue 49); one array constant it does not fold. On SQLite,
    comparisons or'd (as_sqlite)."""

    lookup_name = "one_of"

    def as_postgresql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        return f"{lhs} = ANY(%s)", (*lhs_params, list(self.rhs))

    def as_sqlite(self, compiler, connection):
        # One comparison per value, or'd: SQLite builds an IN list's lookup table afresh in
        # every statement that checks it, 3.4 us an insert against 0.3 us for 24 comparisons
        # (an event's type), on each of a tool call's three inserts and its outcome.
        values = list(self.rhs)
        if not values:
            return super().as_sql(compiler, connection)
        lhs, lhs_params = self.process_lhs(compiler, connection)
        params = [p for value in values for p in (*lhs_params, value)]
        return "(" + " OR ".join([f"{lhs} = %s"] * len(values)) + ")", params


class RowIdField(models.BigAutoField):
    """The id of the tables every tool call inserts into (events, effects). On SQLite it is
    the table's rowid without AUTOINCREMENT, which reads and rewrites sqlite_sequence in every
    insert: one more page in each of a call's two commits, flushed with them at FULL (issue
    49). A new row takes the highest id plus one, so ids still only grow while the newest row
    stands, and nothing deletes events or effects (append-only, and written by the ledger
    only) but a test's flush. PostgreSQL's identity column is unchanged."""

    def db_type_suffix(self, connection):
        return None if connection.vendor == "sqlite" else super().db_type_suffix(connection)


class ImmutableRowError(Exception):
    """Raised when code tries to change or delete an append-only row."""


class AppendOnlyQuerySet(models.QuerySet):
    # Bulk paths bypass Model.save()/delete(), so they are closed here too. The database
    # triggers (migration 0002) close the raw-SQL paths.
    def update(self, **kwargs: Any) -> int:
        raise ImmutableRowError(f"{self.model.__name__} rows are append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise ImmutableRowError(f"{self.model.__name__} rows are append-only")

    delete.queryset_only = True  # type: ignore[attr-defined]


class AppendOnlyModel(models.Model):
    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ImmutableRowError(f"{type(self).__name__} rows are append-only")
        kwargs["force_insert"] = True
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ImmutableRowError(f"{type(self).__name__} rows are append-only")


class RunStatus(models.TextChoices):
    # Created, first stage queued, no worker has started yet.
    PENDING = "pending", "Pending"
    # A stage is executing or queued between stages; a worker holds or will take the lease.
    RUNNING = "running", "Running"
    # The worker went away (lease expired, job lost); facts are intact, a human decides.
    INTERRUPTED = "interrupted", "Interrupted"
    # A stage raised or its output failed verification.
    FAILED = "failed", "Failed"
    # The engine stopped before an effect it must not guess about (NEVER policy, or an
    # outcome it could not learn); a supervisor or operator has to decide.
    NEEDS_APPROVAL = "needs_approval", "Needs approval"
    # An operator approved a plan; the next stage is queued.
    RESUMING = "resuming", "Resuming"
    # A stage asked a human (a review, a confirmation of a call) and stopped before acting:
    # no lease, no worker, no job in Redis. The answer queues the stage again (runs/gates/).
    WAITING = "waiting", "Waiting for a decision"
    SUCCEEDED = "succeeded", "Succeeded"
    # Replaced by an upgrade branch; kept read-only for its history.
    SUPERSEDED = "superseded", "Superseded"
    # A stopped run an operator gave up on, with a reason (runs/planning/close_out.py): never
    # resumed, out of the inbox. Its unsettled effects stay as they were: closing settles
    # nothing outside.
    CLOSED = "closed", "Closed out"


# A status after a run's id, where "is <label>" does not read ("is succeeded").
STATUS_SAID = {
    RunStatus.SUCCEEDED: "has succeeded",
    RunStatus.FAILED: "has failed",
    RunStatus.NEEDS_APPROVAL: "needs approval",
    RunStatus.SUPERSEDED: "was superseded by a branch",
}


class RunSeverity(models.IntegerChoices):
    """How urgently a run that needs a human wants one: the inbox's order inside attention 0.
    Waiting gates first (a person is asked before anything happened), then a blocked plan
    (nobody can resume it until a supervisor decides), resumed work that departed from its
    plan, a resume that stopped again (someone approved it, and it did not get through:
    not one more time-out among many), failures, and interruptions (the plan usually
    resumes them as they are)."""

    NONE = 0, "Needs no human"
    WAITING = 1, "Waiting for a decision"
    BLOCKED = 2, "Blocked"
    DEVIATED = 3, "Deviated"
    # A resumed run (or an upgrade's branch) that stopped again: the stored plan ranks it so
    # (stored_plans._rank), as it does a blocked plan; migration 0022 made room for it.
    RESUME_FAILED = 4, "Its resume stopped again"
    FAILED = 5, "Failed"
    INTERRUPTED = 6, "Interrupted"


class Run(models.Model):
    Status = RunStatus
    Severity = RunSeverity

    ACTIVE = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.RESUMING)
    RESUMABLE = (RunStatus.INTERRUPTED, RunStatus.FAILED, RunStatus.NEEDS_APPROVAL)
    # What a run that waits for a human may be: resumed (or asked at its gate), or closed out.
    STOPPED = (*RESUMABLE, RunStatus.WAITING)
    TERMINAL = (RunStatus.SUCCEEDED, RunStatus.SUPERSEDED, RunStatus.CLOSED)

    pipeline = models.CharField(max_length=64)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.PENDING)
    # 0 = needs a human, 1 = active, 2 = done. Stored (kept by the append path) so the inbox can
    # page on an index instead of sorting on a CASE expression.
    attention = models.PositiveSmallIntegerField(default=1)
    # RunSeverity, for runs with attention 0: kept by the append path from the status and
    # the deviation (severity_for), and raised to BLOCKED by the stored plan when its plan at
    # the run's current version is blocked (stored_plans.store); 0 for the others.
    severity = models.PositiveSmallIntegerField(default=RunSeverity.NONE)
    current_stage = models.CharField(max_length=64, blank=True)
    # Bumped by every append; approvals compare-and-set on it (optimistic concurrency).
    version = models.PositiveIntegerField(default=0)
    # Head of the event log: the last seq and its chained hash. Only append.py writes them.
    last_seq = models.PositiveIntegerField(default=0)
    head_hash = models.CharField(max_length=64, blank=True)
    # HMAC of (run, last_seq, head_hash) under RESUMER_CHAIN_KEY, which the database never holds
    # (chain.head_anchor); written in the same statement that moves the head, "" without a key.
    head_anchor = models.CharField(max_length=64, blank=True)
    # Input versions pinned when the run was created, e.g. {"facts": "v3", "topic": "..."}.
    inputs = models.JSONField(default=dict)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="branches"
    )
    branch_checkpoint = models.ForeignKey(
        "Checkpoint",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="branches",
    )
    # The stage job that may start next; consumed once (compare-and-set) by the job that runs,
    # so a redelivered or duplicated RQ job finds nothing to do.
    ticket = models.CharField(max_length=32, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    # How many approvals resumed this run (0 for the original execution).
    attempt = models.PositiveIntegerField(default=0)
    # The resumed work departed from its approved plan (a PLAN_DEVIATED event): the run
    # stays with those that need a human whatever its status, until the next approval.
    deviated = models.BooleanField(default=False)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # Inbox (runs/reads/inbox.py inbox_page, and its reason filters and
            # counts on the attention=0 prefix): needs-a-human first, by severity, then most
            # recently changed; keyset paging.
            models.Index(
                fields=["attention", "severity", "-updated_at", "-id"], name="run_inbox_idx"
            ),
            # Inbox filters by status / pipeline with the same ordering.
            models.Index(fields=["status", "-updated_at", "-id"], name="run_status_idx"),
            # Sweeper: active runs whose lease or queued job may be gone.
            models.Index(fields=["status", "queued_at"], name="run_sweep_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__one_of=RunStatus.values), name="run_status_valid"
            ),
            # A branch point only makes sense on a branch.
            models.CheckConstraint(
                condition=models.Q(parent__isnull=False) | models.Q(branch_checkpoint__isnull=True),
                name="run_branch_point_needs_parent",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def public_id(self) -> str:
        return ids.run_id(self.pk)

    @classmethod
    def attention_for(cls, status: str, deviated: bool = False) -> int:
        if status == RunStatus.CLOSED:
            return 2  # a human decided already, deviation or not
        if status in cls.RESUMABLE or status == RunStatus.WAITING or deviated:
            return 0
        if status in cls.ACTIVE:
            return 1
        return 2

    @classmethod
    def severity_for(cls, status: str, deviated: bool = False, resumed: bool = False) -> int:
        """The severity the append path can know (a blocked plan comes later, from the
        stored plan, and so does `resumed`: the stop of a run that was resumed)."""
        if status == RunStatus.WAITING:
            return RunSeverity.WAITING
        if cls.attention_for(status, deviated) != 0:
            return RunSeverity.NONE
        if deviated:
            return RunSeverity.DEVIATED
        if resumed and status in cls.RESUMABLE:
            return RunSeverity.RESUME_FAILED
        if status == RunStatus.INTERRUPTED:
            return RunSeverity.INTERRUPTED
        return RunSeverity.FAILED

    @classmethod
    def locked(cls, pk: int, *, missing: type[Exception]) -> Run:
        """The run, its row locked for the caller's transaction. Every writer locks the run
        first, so a person's act (an answer, an approval, an Ask again, a close-out) on the
        same run waits here and then finds it moved. `missing`, saying so, for no such run."""
        run = cls.objects.select_for_update().filter(pk=pk).first()
        if run is None:
            raise missing(f"there is no run {pk}")
        return run

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def status_said(self) -> str:
        """The run's status in a sentence after its id: "run-9 has succeeded", not "is
        succeeded"."""
        said = STATUS_SAID.get(self.status)
        return said or f"is {self.get_status_display().lower()}"

    @property
    def is_resumable(self) -> bool:
        return self.status in self.RESUMABLE

    @property
    def is_waiting(self) -> bool:
        return self.status == RunStatus.WAITING

    @property
    def is_stopped(self) -> bool:
        return self.status in self.STOPPED

    @property
    def was_resumed(self) -> bool:
        """Resumed by an approval, or an upgrade's branch: its stop is a resume that failed."""
        return self.attempt > 0 or self.parent_id is not None

    def lineage(self) -> list[Run]:
        """This run and its ancestors, nearest first."""
        chain, node = [self], self
        while node.parent_id is not None:
            node = node.parent
            chain.append(node)
        return chain

    @property
    def root(self) -> Run:
        return self.lineage()[-1]


class EventType(models.TextChoices):
    RUN_CREATED = "RUN_CREATED", "Run created"
    STARTED = "STARTED", "Stage started"
    TOOL_CALLED = "TOOL_CALLED", "Tool called"
    TOOL_RESULT = "TOOL_RESULT", "Tool result"
    VERIFIED = "VERIFIED", "Verified"
    FAILED = "FAILED", "Failed"
    INTERRUPTED = "INTERRUPTED", "Interrupted"
    NEEDS_APPROVAL = "NEEDS_APPROVAL", "Needs approval"
    PLAN_APPROVED = "PLAN_APPROVED", "Plan approved"
    RECONCILED = "RECONCILED", "Effect reconciled"
    RESUMED = "RESUMED", "Resumed"
    BRANCHED = "BRANCHED", "Branched"
    SUCCEEDED = "SUCCEEDED", "Succeeded"
    LEDGER_EDITED = "LEDGER_EDITED", "Ledger edited"
    # The verdict on resumed work against the approved plan (runs/planning/contract.py).
    PLAN_KEPT = "PLAN_KEPT", "Plan kept"
    PLAN_DEVIATED = "PLAN_DEVIATED", "Plan deviated"
    # A stage asked a human and the run waits (runs/gates/); the answer, one per person who
    # answered (a gate may need two), carries who, when, what and the diff.
    GATE_OPENED = "GATE_OPENED", "Waiting for a decision"
    HUMAN_ANSWERED = "HUMAN_ANSWERED", "Human answered"
    # An operator read how a finished run departed from its plan and accepted it, with a
    # reason: the run leaves the inbox (runs/planning/acknowledge.py).
    ACKNOWLEDGED = "ACKNOWLEDGED", "Deviation acknowledged"
    # A supervisor asked an effect's target what it holds (a POST, never a page view), before
    # resolving the effect: what it answered is then one click from a ledger edit.
    TARGET_ASKED = "TARGET_ASKED", "Target asked"
    # The target refused a call a human had confirmed: the confirmation is asked again (the
    # run waits), with the refused attempt in the payload (runs/gates/reopen.py).
    GATE_REOPENED = "GATE_REOPENED", "Asked again"
    # An operator closed a stopped run out, with a reason: it is never resumed
    # (runs/planning/close_out.py).
    CLOSED_OUT = "CLOSED_OUT", "Closed out"
    # A stage run again in the same run asked for a call it had made with another request
    # (another key, other arguments, another conversation): what differs, and whether the
    # stage stopped before anything was sent (runs/planning/replay_log.py).
    DIVERGED = "DIVERGED", "Diverged"
    # A value a stage took from the world once (ctx.now(), ctx.uuid()), replayed whenever
    # the stage runs again in the same run.
    VALUE_RECORDED = "VALUE_RECORDED", "Value recorded"


class Event(AppendOnlyModel):
    Type = EventType

    id = RowIdField(primary_key=True)
    # No index of its own: event_run_seq_unique (run, seq) serves every lookup by run, and
    # each index more is one more write on every append.
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events", db_index=False)
    seq = models.PositiveIntegerField()
    stage = models.CharField(max_length=64, blank=True)
    type = models.CharField(max_length=20, choices=EventType.choices)
    # Input versions the stage ran against, e.g. {"facts": "v3"}.
    inputs = models.JSONField(default=dict, blank=True)
    # Small payloads inline; larger ones stored as an artifact and referenced here.
    payload = models.JSONField(default=dict, blank=True)
    payload_ref = models.CharField(max_length=255, blank=True)
    artifacts = models.JSONField(default=list, blank=True)
    idempotency_key = models.CharField(max_length=64, blank=True)
    actor = models.CharField(max_length=128)
    # Fencing token of the lease the writer held (null only for RUN_CREATED).
    token = models.PositiveBigIntegerField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            # Timeline paging by seq and the planner's tail scan (seq > checkpoint.last_seq)
            # both use this index; it also makes a duplicate seq impossible.
            models.UniqueConstraint(fields=["run", "seq"], name="event_run_seq_unique"),
            models.CheckConstraint(condition=models.Q(seq__gte=1), name="event_seq_positive"),
            models.CheckConstraint(
                condition=models.Q(type__one_of=EventType.values), name="event_type_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"


class Checkpoint(AppendOnlyModel):
    # e.g. "run-9269:visual-verified"; a stage verified again in the same run gets "-2", "-3".
    id = models.CharField(primary_key=True, max_length=120)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="checkpoints")
    # Seq of the VERIFIED event this checkpoint seals; events after it are the tail to replay.
    last_seq = models.PositiveIntegerField()
    stage = models.CharField(max_length=64)
    next_stage = models.CharField(max_length=64, blank=True)
    # {"inputs": {...}, "artifacts": [{"name", "uri", "sha256", "size"}], "rules": [...],
    #  "outputs": {...}}
    manifest = models.JSONField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["run", "last_seq"]
        constraints = [
            # The planner's "latest checkpoint of this run" is the max last_seq on this index.
            models.UniqueConstraint(fields=["run", "last_seq"], name="checkpoint_run_seq_unique"),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def artifacts(self) -> list[dict[str, Any]]:
        return list(self.manifest.get("artifacts", []))

    @property
    def outputs(self) -> dict[str, Any]:
        return dict(self.manifest.get("outputs", {}))


class ReplayPolicy(models.TextChoices):
    SAFE = "SAFE", "Safe: re-run freely"
    IDEMPOTENT = "IDEMPOTENT", "Idempotent: re-run with the same key"
    RECONCILE_FIRST = (
        "RECONCILE_FIRST",
        "Reconcile first: ask the target before re-running",
    )
    NEVER = "NEVER", "Never: a human decides"


class EffectStatus(models.TextChoices):
    # Written before the external call; nothing is known about the outcome yet.
    INTENT = "intent", "Intent"
    CONFIRMED = "confirmed", "Confirmed"
    # The target said no: nothing happened there, a new attempt is safe.
    FAILED = "failed", "Failed"
    # The call may or may not have happened (timeout, crash after the call).
    UNKNOWN = "unknown", "Unknown"
    # A supervisor decided this effect is not to happen; the stage goes on without it.
    ABANDONED = "abandoned", "Abandoned"
    # The target refused the delivery key (409): it holds a different request under it.
    # Nothing happened for this request, and calling again with the key cannot help.
    CONFLICT = "conflict", "Key conflict"


class Effect(models.Model):
    Status = EffectStatus

    SETTLED = (EffectStatus.CONFIRMED, EffectStatus.ABANDONED)

    id = RowIdField(primary_key=True)
    # Unique by a constraint (Meta), not unique=True: on PostgreSQL that would add a
    # varchar_pattern_ops index for LIKE queries, which a hex digest never gets, written on
    # every intent.
    delivery_key = models.CharField(max_length=64)
    # Served by effect_run_call_idx, which starts with run: no index of its own.
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="effects", db_index=False)
    stage = models.CharField(max_length=64)
    # The stage's own name for this call ("upload-cover"); stable across attempts.
    call_id = models.CharField(max_length=64)
    tool = models.CharField(max_length=64)
    policy = models.CharField(max_length=20, choices=ReplayPolicy.choices)
    target = models.CharField(max_length=128)
    request_hash = models.CharField(max_length=64)
    request = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=12, choices=EffectStatus.choices, default=EffectStatus.INTENT
    )
    external_id = models.CharField(max_length=128, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=10, decimal_places=4, default=0)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # Planner and run page: this run's effects by stage and call; the admin's runs
            # with an unsettled effect, walked backwards by run.
            models.Index(fields=["run", "stage", "call_id"], name="effect_run_call_idx"),
            # Nothing indexes status: an outcome's UPDATE then moves no indexed column, and
            # PostgreSQL makes it in place (HOT; migration 0022). The admin's status filter
            # reads the table.
        ]
        constraints = [
            # One effect per delivery key; an intent claims its key with INSERT ... ON
            # CONFLICT (delivery_key) DO NOTHING against it (runs/ledger/sql/).
            models.UniqueConstraint(fields=["delivery_key"], name="effect_delivery_key_unique"),
            models.CheckConstraint(
                condition=models.Q(status__one_of=EffectStatus.values),
                name="effect_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(policy__one_of=ReplayPolicy.values),
                name="effect_policy_valid",
            ),
            # A confirmed effect always names what it produced outside.
            models.CheckConstraint(
                condition=~models.Q(status="confirmed") | ~models.Q(external_id=""),
                name="effect_confirmed_has_external_id",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool}:{self.call_id} [{self.status}]"


# artifact://facts/v3: the name "facts", version 3.
ARTIFACT_URI = re.compile(r"^artifact://(?P<name>[A-Za-z0-9_./-]+)/v(?P<version>\d+)$")


class Artifact(AppendOnlyModel):
    # Versioned name: "facts/v3" is name "facts", version 3; the uri is artifact://facts/v3.
    name = models.CharField(max_length=200)
    version = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()
    content_type = models.CharField(max_length=100, default="application/octet-stream")
    # Path of the blob in the default storage; blobs are shared by identical content.
    blob = models.CharField(max_length=255)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # Resolving artifact://name/vN and "latest version of name".
            models.UniqueConstraint(
                fields=["name", "version"], name="artifact_name_version_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(version__gte=1), name="artifact_version_positive"
            ),
        ]
        indexes = [
            # "Is this blob already stored?" when saving content-addressed data.
            models.Index(fields=["sha256"], name="artifact_sha_idx"),
        ]

    def __str__(self) -> str:
        return self.uri

    @property
    def uri(self) -> str:
        return f"artifact://{self.name}/v{self.version}"

    @classmethod
    def named(cls, uri: str) -> Artifact | None:
        """The row `uri` (artifact://name/vN) names; None when there is none, or `uri` is not
        an artifact's."""
        match = ARTIFACT_URI.match(uri or "")
        if match is None:
            return None
        return cls.objects.filter(name=match["name"], version=int(match["version"])).first()

    def content(self) -> bytes:
        """The blob's bytes, as storage holds them now (OSError when they are gone)."""
        with default_storage.open(self.blob, "rb") as handle:
            return handle.read()

    @property
    def is_image(self) -> bool:
        return self.content_type.startswith("image/")

    @property
    def is_text(self) -> bool:
        return self.content_type.startswith("text/") or self.content_type == "application/json"


class Lease(models.Model):
    """The single-writer lease of one run. The token only ever increases: every takeover bumps
    it, and every write compares it, so a worker that slept through a takeover writes nothing."""

    run = models.OneToOneField(
        Run, on_delete=models.PROTECT, primary_key=True, related_name="lease"
    )
    holder = models.CharField(max_length=128, blank=True)
    token = models.PositiveBigIntegerField(default=0)
    expires_at = models.DateTimeField(db_default=Now())
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)

    # No index but the primary key: every stage takes and gives back its run's lease, and
    # with no indexed column moving PostgreSQL updates the row in place (HOT), without new
    # index entries. The sweeper's "leases that ran out" (sweeper.find_expired) starts from
    # the active runs (run_status_idx) and joins their leases by key; an index on expires_at
    # served it no better, as a released lease's expires_at is in the past too.

    def __str__(self) -> str:
        return f"{self.run_id} token={self.token} holder={self.holder or '-'}"


class StageLog(models.Model):
    """What one stage job of a run wrote to the log, and the traceback it failed with
    (runs/execution/stage_log.py). Kept for the attempts that left the run for a human
    (failed, stopped, interrupted), for the operator reading why. It is not evidence: it
    is not in the event log, nothing chains it, and it may be incomplete (a worker that dies
    keeps only what it flushed before)."""

    # How often a running stage's lines are written: what a worker that dies may leave out.
    FLUSH_SECONDS = 5

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="stage_logs", db_index=False
    )
    stage = models.CharField(max_length=64)
    # The fencing token of the stage job's lease: every take bumps it, so it numbers the run's
    # stage jobs, and one job writes one row.
    token = models.PositiveBigIntegerField()
    # The run's attempt (approved resumes) the job ran in, and the lease holder that ran it.
    attempt = models.PositiveIntegerField(default=0)
    worker = models.CharField(max_length=128)
    # engine.Outcome's value once the job ended; "" while it runs, and for ever if its worker
    # died: the lines are then those flushed before the death.
    outcome = models.CharField(max_length=24, blank=True)
    # Formatted log records, oldest first, newline-separated; `dropped` earlier ones were not
    # kept (the bounds are in stage_log.py).
    lines = models.TextField(blank=True)
    dropped = models.PositiveIntegerField(default=0)
    traceback = models.TextField(blank=True)
    started_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # One row per stage job. The run page's "the run's stage logs, newest first"
            # (runs/reads/run_page.py, stage_logs) reads it backwards on this index's (run, token).
            models.UniqueConstraint(fields=["run", "token"], name="stagelog_run_token_unique"),
        ]

    def __str__(self) -> str:
        return f"log of {ids.run_id(self.run_id)} {self.stage} (token {self.token})"

    @property
    def finished(self) -> bool:
        return bool(self.outcome)


# --- Gates: a stage asks a human before it acts (runs/gates/) --------------------------------


class GateKind(models.TextChoices):
    # ctx.ask(): a question with a form; the answer is what the form returns.
    QUESTION = "question", "Question"
    # A tool that requires a human before its first call: approve, edit or reject the call.
    CONFIRM = "confirm", "Confirmation of a call"


class GateStatus(models.TextChoices):
    OPEN = "open", "Waiting for an answer"
    ANSWERED = "answered", "Answered"
    # Its deadline passed and its on_timeout said to fail the run.
    EXPIRED = "expired", "Timed out"
    # Its run was closed out while it waited: nobody may answer it.
    CLOSED = "closed", "Closed with its run"


class GateRole(models.TextChoices):
    """Who may answer a gate; a supervisor may answer an operator's gate too."""

    OPERATOR = "operator", "Operator"
    SUPERVISOR = "supervisor", "Supervisor"


class GateQuerySet(models.QuerySet):
    def on_db_clock(self) -> GateQuerySet:
        """Each gate with `overdue` (its deadline passed) and `late_by` (how long ago; None
        without a deadline), read on the database's clock: the one the sweeper's time-out and
        an answer's compare-and-set are held against, whatever the web server's clock says."""
        return self.annotate(
            overdue=models.ExpressionWrapper(
                models.Q(deadline__lte=Now()), output_field=models.BooleanField()
            ),
            late_by=models.ExpressionWrapper(
                Now() - F("deadline"), output_field=models.DurationField()
            ),
        )


class Gate(models.Model):
    """A question a stage asked a human, as the run's events say it: GATE_OPENED opened it,
    HUMAN_ANSWERED answered it. Derived state, written in the same transaction as its event
    (runs/gates/rows.py); the events are the record. `subject` is what was asked about (the
    question, its form and initial values; for a confirmation the call's request): a stage
    that runs again asks the same subject once, and a branch whose subject changed asks again."""

    Kind = GateKind
    Status = GateStatus

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="gates", db_index=False)
    stage = models.CharField(max_length=64)
    # The stage's name for the gate ("review"); a confirmation's is its call's id.
    gate_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=8, choices=GateKind.choices)
    subject = models.CharField(max_length=64)
    # Seq of its GATE_OPENED event, and of the HUMAN_ANSWERED that settled it.
    seq = models.PositiveIntegerField()
    answer_seq = models.PositiveIntegerField(null=True, blank=True)
    question = models.TextField()
    # What the reviewer reads beside the question or the call, as markdown the stage wrote
    # (ctx.ask's details=, a Confirm's description=); pages render it sanitised.
    details = models.TextField(blank=True, default="")
    # The form, described field by field (runs/gates/forms.py), and its initial values.
    form = models.JSONField(default=list, blank=True)
    # Where a question's form class is (forms.class_path): its clean() checks the answer.
    form_class = models.TextField(blank=True, default="")
    initial = models.JSONField(default=dict, blank=True)
    # A confirmation's pending call: {tool, policy, target, args, cost, editable, meter}.
    call = models.JSONField(default=dict, blank=True)
    role = models.CharField(max_length=12, choices=GateRole.choices, default=GateRole.OPERATOR)
    quorum = models.PositiveSmallIntegerField(default=1)
    deadline = models.DateTimeField(null=True, blank=True)
    # When the escalation role is told that the deadline comes near, and whether it was.
    escalate_at = models.DateTimeField(null=True, blank=True)
    escalated = models.BooleanField(default=False)
    # {"fail": true} or {"answer": {...}}: what the sweeper does at the deadline, whatever
    # the votes so far (a time-out is not a vote).
    on_timeout = models.JSONField(default=dict, blank=True)
    escalate_to = models.CharField(max_length=12, choices=GateRole.choices, blank=True)
    status = models.CharField(max_length=8, choices=GateStatus.choices, default=GateStatus.OPEN)
    answer = models.JSONField(null=True, blank=True)
    diff = models.JSONField(default=dict, blank=True)
    answered_by = models.CharField(max_length=150, blank=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    # Quorum gates: [{"by", "user", "answer"}] of the people's answers so far; `user` is the
    # pk of the signed-in user who gave it (two votes, two different users).
    votes = models.JSONField(default=list, blank=True)
    # A confirmation asked again after its target refused the call made with its answer
    # (GATE_REOPENED): the refused attempts, oldest first ({answer, by, at, error, key,
    # asked_by, seq}). The next answer's call gets a key revision of its own (asking.py).
    attempts = models.JSONField(default=list, blank=True)
    # Identical gates (same pipeline, stage, gate, kind and call shape) share it: they can be
    # answered together (runs/gates/answers.py).
    shape = models.CharField(max_length=64)
    created_at = models.DateTimeField(db_default=Now())

    objects = GateQuerySet.as_manager()

    class Meta:
        constraints = [
            # A subject is asked once per run: a stage that runs again finds its answer here.
            # Also serves "this run's gates" and the engine's lookup by (run, stage, gate).
            models.UniqueConstraint(
                fields=["run", "stage", "gate_id", "subject"], name="gate_subject_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=GateKind.values), name="gate_kind_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=GateStatus.values), name="gate_status_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(role__in=GateRole.values), name="gate_role_valid"
            ),
            models.CheckConstraint(condition=models.Q(quorum__gte=1), name="gate_quorum_positive"),
            # An answer always says who gave it.
            models.CheckConstraint(
                condition=~models.Q(status="answered") | ~models.Q(answered_by=""),
                name="gate_answered_has_actor",
            ),
        ]
        indexes = [
            # The inbox's "Waiting for a decision" (open gates, oldest first) and the
            # sweeper's time-outs and escalations (open gates by deadline).
            models.Index(fields=["status", "created_at"], name="gate_open_idx"),
            models.Index(fields=["status", "deadline"], name="gate_deadline_idx"),
            # Bulk answering: the open gates of one shape.
            models.Index(fields=["shape", "status"], name="gate_shape_idx"),
        ]

    def __str__(self) -> str:
        return f"{ids.run_id(self.run_id)} {self.stage}/{self.gate_id} [{self.status}]"

    @property
    def is_open(self) -> bool:
        return self.status == GateStatus.OPEN

    @property
    def answered_on_timeout(self) -> bool:
        """Whether the deadline records a default answer; otherwise it fails the run."""
        return self.on_timeout.get("answer") is not None

    @property
    def timeout_outcome(self) -> str:
        """What the deadline does, as the page, the inbox and a late answer's refusal say it."""
        if self.answered_on_timeout:
            return "the time-out records the default answer"
        return "the time-out fails the run"

    def may_answer(self, roles: frozenset[str] | set[str]) -> bool:
        """Whether someone holding `roles` may answer: the gate's role, or a supervisor."""
        return self.role in roles or GateRole.SUPERVISOR in roles

    @property
    def approved(self) -> bool | None:
        """A confirmation's verdict (None while open, or for a question)."""
        if self.kind != GateKind.CONFIRM or self.answer is None:
            return None
        return self.answer.get("decision") == "approve"


class StoredPlan(models.Model):
    """The reconcile plan of a run as it was last computed: when the run stopped, when a ledger
    edit changed the facts, or when an operator asked the targets again. Pages show it and
    never compute one (a plan asks targets reconcile questions); an approval always computes
    a fresh plan and compares fingerprints. One row per run, replaced on every computation."""

    run = models.OneToOneField(
        Run, on_delete=models.CASCADE, primary_key=True, related_name="stored_plan"
    )
    fingerprint = models.CharField(max_length=64)
    # The run's version the plan was computed at: a different version now means the facts
    # moved since, and the page says so.
    run_version = models.PositiveIntegerField()
    computed_at = models.DateTimeField(db_default=Now())
    # planner.Plan.to_dict(); Plan.from_dict() gives the value back.
    data = models.JSONField()
    # What the inbox shows without reading `data`. A plan that offers no resume (a stage its
    # reviewer sent back, runs/gates/sent_back.py) still prices one in `data`: the inbox must
    # not offer it.
    resumable = models.BooleanField(default=True)
    blocked = models.BooleanField(default=False)
    drifted = models.BooleanField(default=False)
    resume_money = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    fresh_money = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    resume_calls = models.PositiveIntegerField(default=0)
    fresh_calls = models.PositiveIntegerField(default=0)
    # What the plan does about each call whose outcome the ledger does not know (intent or
    # unknown), {"stage/call": action}: the inbox says it beside the stop ("publish outcome
    # unknown; the target has it"). A few entries at most.
    unsettled = models.JSONField(default=dict, blank=True)

    # The group fingerprint of the plan's shape (runs/planning/grouping.py): what a human decides on,
    # without the run. Runs whose plans share it are approved together.
    shape = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        indexes = [
            # triage.group(): the runs of one group, and the inbox's GROUP BY shape.
            models.Index(fields=["shape", "run"], name="storedplan_shape_idx"),
        ]

    def __str__(self) -> str:
        return f"plan of run-{self.run_id} ({self.fingerprint[:12]})"


# --- Approvals (runs/planning/resume.py, runs/planning/triage.py) ---------------------------


class ApprovalMode(models.TextChoices):
    """What an operator approves of a plan. The value is what PLAN_APPROVED records as its
    "action" and GroupApproval keeps in its `action` column."""

    STRICT = "strict", "Strict resume"
    UPGRADE = "upgrade", "Upgrade"


class GroupApprovalState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Being approved"
    DONE = "done", "Done"
    # Refused as a whole when the job came to it (the group emptied, became blocked ...).
    REFUSED = "refused", "Refused"
    FAILED = "failed", "Failed"


class GroupApproval(models.Model):
    """An operator's approval of a group of runs, carried out by a worker (triage.run_batch):
    approving hundreds of runs takes longer than a web request may. Its id is the batch id
    every PLAN_APPROVED of the batch names. `approved` and `skipped` fill in as the job goes
    (saved every few runs): the batch page reads its progress and its result from them."""

    State = GroupApprovalState

    id = models.CharField(max_length=32, primary_key=True)
    group = models.CharField(max_length=64)
    action = models.CharField(max_length=8)
    actor = models.CharField(max_length=150)
    # The runs the operator approved (those the page showed, or the ticked ones): a run that
    # joins the group afterwards is not in the batch.
    run_ids = models.JSONField()
    state = models.CharField(
        max_length=8, choices=GroupApprovalState.choices, default=GroupApprovalState.QUEUED
    )
    # [{"run": pk, "resumed": pk, "branch": bool, "stage": str}]
    approved = models.JSONField(default=list)
    # [{"run": pk, "reason": str, "plan": {fingerprint, next_stage, calls, money, blocked,
    #   group} or null}]: each run skipped, with the fresh plan it was skipped for.
    skipped = models.JSONField(default=list)
    # Why the whole batch was refused, or what went wrong.
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(state__in=GroupApprovalState.values),
                name="groupapproval_state_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"batch {self.id[:12]}"

    @property
    def total(self) -> int:
        return len(self.run_ids)

    @property
    def done(self) -> int:
        return len(self.approved) + len(self.skipped)

    @property
    def finished(self) -> bool:
        return self.state not in (GroupApprovalState.QUEUED, GroupApprovalState.RUNNING)


# --- Notifications (runs/notify.py) ----------------------------------------------------------


class NotificationState(models.TextChoices):
    # Runs that stop now join it. At most one notification is open at a time.
    OPEN = "open", "Open: runs are joining"
    # The window closed but Redis refused its delivery jobs; the next sweep queues them again.
    CLOSED = "closed", "Closed: waiting to be queued"
    # Its delivery jobs are on the queue; the deliveries say how each attempt went.
    QUEUED = "queued", "Queued"


class Notification(models.Model):
    """One message (per target) about the runs that stopped within one window: a single run,
    or a whole outage's worth of them. runs/notify.py says how runs join and how it is sent."""

    State = NotificationState

    state = models.CharField(
        max_length=8, choices=NotificationState.choices, default=NotificationState.OPEN
    )
    opened_at = models.DateTimeField(db_default=Now())
    queued_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            # The compare-and-set that batches an outage: of two sweepers that both find no
            # open notification, the second one's insert fails and it joins the first one's.
            # It also serves "the open notification" that every stopping run looks up.
            models.UniqueConstraint(
                fields=["state"],
                condition=models.Q(state=NotificationState.OPEN),
                name="notification_one_open",
            ),
            models.CheckConstraint(
                condition=models.Q(state__in=NotificationState.values),
                name="notification_state_valid",
            ),
        ]
        indexes = [
            # Sweepers: notifications whose window is over (open or closed, opened long enough ago).
            models.Index(fields=["state", "opened_at"], name="notification_due_idx"),
        ]

    def __str__(self) -> str:
        return f"notification {self.pk}"


class NotificationRun(models.Model):
    """A run in a notification, with the event that put it there."""

    notification = models.ForeignKey(Notification, on_delete=models.PROTECT, related_name="runs")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="notices")
    # The event that stopped the run, and why it is in the message: the status it moved
    # into, or the event's type (notify.NOTIFY_ON holds both kinds).
    seq = models.PositiveIntegerField()
    reason = models.CharField(max_length=32)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            # A run is in a message once. The index also serves the message's run list and
            # the inbox filtered to one notification (?notice=).
            models.UniqueConstraint(fields=["notification", "run"], name="notification_run_unique"),
        ]

    def __str__(self) -> str:
        return f"{ids.run_id(self.run_id)} in notification {self.notification_id}"


class DeliveryChannel(models.TextChoices):
    WEBHOOK = "webhook", "Webhook"
    EMAIL = "email", "Email"


class Delivery(AppendOnlyModel):
    """One attempt to send a notification to one target: the delivery log."""

    Channel = DeliveryChannel

    notification = models.ForeignKey(
        Notification, on_delete=models.PROTECT, related_name="deliveries"
    )
    channel = models.CharField(max_length=8, choices=DeliveryChannel.choices)
    # The webhook's scheme and host (its path may be a credential, as Slack's are), or the
    # email addresses.
    target = models.CharField(max_length=255)
    attempt = models.PositiveSmallIntegerField()
    ok = models.BooleanField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"
        constraints = [
            # A job numbers its attempt from this index's (notification, channel) prefix.
            models.UniqueConstraint(
                fields=["notification", "channel", "attempt"], name="delivery_attempt_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(channel__in=DeliveryChannel.values),
                name="delivery_channel_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.channel} attempt {self.attempt} of notification {self.notification_id}"


class SupervisorAsk(AppendOnlyModel):
    """An operator asked a supervisor to settle an effect from its page (runs/asks.py): who
    asked and when, and the notification that tells the supervisors (None when notifications
    are off: the effect's page still shows the ask)."""

    effect = models.ForeignKey(Effect, on_delete=models.PROTECT, related_name="asks")
    # Who asked, as events name a person ("user:<name>", runs/ids.py).
    asked_by = models.CharField(max_length=160)
    notification = models.ForeignKey(
        Notification, on_delete=models.PROTECT, null=True, blank=True, related_name="asks"
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.asked_by} asked a supervisor about effect {self.effect_id}"


# --- The JSON API: tokens and idempotent requests (runs/api/) --------------------------------


class ApiToken(models.Model):
    """A named token a user made to call the API as themselves (`Authorization: Bearer …`).
    Only the sha256 of the secret is kept; the secret is shown once, when it is made. A token
    acts with its user's role; a revoked one is refused everywhere."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    # The token's first characters, shown in lists so a person can tell their tokens apart.
    prefix = models.CharField(max_length=16)
    # Unique: serves the lookup of every API request made with a token (by the secret's hash).
    secret_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(db_default=Now())
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"
        indexes = [
            # The token page: one user's tokens, newest first.
            models.Index(fields=["user", "-created_at"], name="apitoken_user_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class IdempotentRequest(models.Model):
    """A POST made with an `Idempotency-Key` (runs/api/idempotency.py): the key is claimed
    before the action, and the response is stored with it, in the action's transaction, so
    the same key and body get the same response without acting again. `status` is null
    while the first request runs; a claim left null longer than
    RESUMER_IDEMPOTENCY_CLAIM_SECONDS was left by a process that died (its action rolled
    back with it), and the next request with the key and body takes it over."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    # sha256 of the method, the path and the body as parsed: another body under the same key
    # is refused.
    request_hash = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    # The claim in force: when it was taken, and how many times (a takeover counts one more).
    # The response is stored only under the attempt that acted, so a request slower than the
    # bound, whose claim was taken over, stores nothing and its action rolls back.
    claimed_at = models.DateTimeField(db_default=Now())
    attempt = models.PositiveIntegerField(default=1)

    class Meta:
        constraints = [
            # The key is the user's: also serves the one lookup of a request by (user, key).
            models.UniqueConstraint(fields=["user", "key"], name="idempotent_request_unique"),
        ]
        indexes = [
            # The sweeper's purge of rows past their retention.
            models.Index(fields=["created_at"], name="idempotent_request_age_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.key} [{self.status or 'running'}]"

    def take_over(self) -> bool:
        """Take this abandoned claim for the caller (a compare-and-set on the database's
        clock, which stamped the claim: of two requests racing for it, one wins); False when
        it is not abandoned (younger than any request may run) or another took it."""
        bound = timedelta(seconds=settings.RESUMER_IDEMPOTENCY_CLAIM_SECONDS)
        taken = IdempotentRequest.objects.filter(
            pk=self.pk,
            status__isnull=True,
            attempt=self.attempt,
            claimed_at__lt=Now() - bound,
        ).update(attempt=F("attempt") + 1, claimed_at=Now())
        if taken:
            self.attempt += 1
        return bool(taken)

    def settle(self, status: int, response: Any) -> bool:
        """Store the response under this attempt; False when the claim was taken over
        meanwhile (the caller's transaction must then roll its action back)."""
        return bool(
            IdempotentRequest.objects.filter(
                pk=self.pk, attempt=self.attempt, status__isnull=True
            ).update(status=status, response=response)
        )

    @classmethod
    def purge(cls) -> int:
        """Forget keys older than RESUMER_IDEMPOTENCY_RETENTION_HOURS (the worker's sweeper,
        each round): a client retries within minutes, not days."""
        cutoff = timezone.now() - timedelta(hours=settings.RESUMER_IDEMPOTENCY_RETENTION_HOURS)
        deleted, _ = cls.objects.filter(created_at__lt=cutoff).delete()
        return deleted

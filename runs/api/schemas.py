"""What the API takes and gives, as pydantic models: the OpenAPI schema's components. Money is
a decimal string (exact, as the ledger keeps it); a run is named by its public id, "run-12"."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Field, Schema
from ninja.responses import codes_4xx
from pydantic import ConfigDict, StringConstraints

from runs.ledger.reasons import MAX_REASON_CHARS

Mode = Literal["strict", "upgrade"]
Fingerprint = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
RunId = Annotated[str, StringConstraints(max_length=40)]
Short = Annotated[str, StringConstraints(max_length=2000)]


class ProblemOut(Schema):
    """RFC 9457 problem details; some problems add members (`plan`, `errors`)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str


# What every endpoint may answer besides its success: a problem, for any 4xx.
PROBLEMS = {codes_4xx: ProblemOut}


class UserOut(Schema):
    username: str
    role: str
    roles: list[str]
    # How this request was authenticated: "token" or "session".
    via: str


# --- Runs ------------------------------------------------------------------------------------


class StoredPlanFigures(Schema):
    run_version: int
    blocked: bool
    drifted: bool
    resume_money: str
    fresh_money: str
    resume_calls: int
    fresh_calls: int


class StopOut(Schema):
    """Why a run needs a human, as the inbox says it."""

    why: list[str]
    stopped_at: datetime | None
    plan: StoredPlanFigures | None
    plan_changed: bool


class RunOut(Schema):
    id: str
    pipeline: str
    status: str
    current_stage: str
    attempt: int
    version: int
    last_seq: int
    deviated: bool
    needs_human: bool
    parent: str | None
    created_at: datetime
    updated_at: datetime
    stop: StopOut | None = None


class RunPage(Schema):
    items: list[RunOut]
    # Pass it as `after` for the next page; null on the last page.
    next_after: str | None
    needs_human: int


class StepOut(Schema):
    stage: str
    state: str


class VerdictOut(Schema):
    kept: bool
    seq: int
    fingerprint: str
    mode: str
    summary: str


class RunDetailOut(RunOut):
    inputs: dict[str, Any]
    branches: list[str]
    progress: list[StepOut]
    verdict: VerdictOut | None


class StartIn(Schema):
    """The pipeline and its inputs: a version or value as text, a typed input as its JSON
    (an object or a list, checked against the input's schema; its text is taken too). A bad
    input is a 422 naming it in `input`; no run is made."""

    pipeline: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    inputs: dict[
        Annotated[str, StringConstraints(max_length=64)], Short | dict[str, Any] | list[Any]
    ] = Field(default_factory=dict, max_length=50)


class EventOut(Schema):
    seq: int
    type: str
    stage: str
    actor: str
    created_at: datetime
    # The payload as the timeline shows it (a large one is summarised; payload_ref names it).
    payload: dict[str, Any]
    payload_ref: str


class EventPage(Schema):
    items: list[EventOut]
    # Pass it as `after` for the next page; null when these are the latest events.
    next_after: int | None


class EffectOut(Schema):
    id: int
    stage: str
    call_id: str
    tool: str
    policy: str
    target: str
    status: str
    delivery_key: str
    external_id: str
    attempts: int
    cost: str
    error: str
    request: dict[str, Any]
    result: Any
    created_at: datetime
    updated_at: datetime


# --- Plans and approvals ---------------------------------------------------------------------


class StoredPlanOut(Schema):
    run: str
    fingerprint: str
    run_version: int
    computed_at: datetime
    # False when the run moved since the plan was computed: ask the targets again.
    current: bool
    plan: dict[str, Any]


class ReasonIn(Schema):
    """A person's reason, recorded in the run's chain as they gave it (runs/ledger/reasons.py
    checks it again: a blank one is refused there)."""

    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS)


class ApproveIn(Schema):
    mode: Mode
    fingerprint: Fingerprint


class ApprovalOut(Schema):
    run: str
    mode: Mode
    fingerprint: str
    # The run that goes on: the run itself (strict), or its new branch (upgrade).
    resumed: str
    branch: str | None
    next_stage: str
    approved_by: str
    approved_at: datetime


# --- Groups ----------------------------------------------------------------------------------


class GroupOut(Schema):
    fingerprint: str
    count: int
    status: str
    next_stage: str
    blocked: bool
    approvable: bool
    upgrade_available: bool
    headline: str
    summary: str
    resume_money: str


class GroupList(Schema):
    groups: list[GroupOut]
    # Runs that need a human whose plan is not stored yet: they join a group once it is.
    unplanned: int


class MemberOut(Schema):
    run: str
    fingerprint: str
    status: str
    current_stage: str
    resume_money: str


class GroupDetailOut(GroupOut):
    runs: list[MemberOut]


class GroupApproveIn(Schema):
    mode: Mode
    # The runs to approve, as the group showed them ("run-12"): each is checked on its plan.
    runs: list[RunId] = Field(min_length=1, max_length=10_000)


class SkippedOut(Schema):
    run: str
    reason: str
    plan: dict[str, Any] | None


class ApprovedOut(Schema):
    run: str
    resumed: str
    branch: bool
    stage: str


class BatchOut(Schema):
    batch: str
    group: str
    # queued | running | done | refused | failed
    state: str
    approved: list[ApprovedOut]
    skipped: list[SkippedOut]
    error: str = ""


# --- Gates -----------------------------------------------------------------------------------


class GateOut(Schema):
    id: int
    run: str
    stage: str
    gate_id: str
    kind: str
    question: str
    # What the stage gave the reviewer to read (markdown; the gate page renders it sanitised).
    details: str
    # The form, field by field (runs/gates/forms.py), its initial values, and for a
    # confirmation the call it asks about.
    form: list[dict[str, Any]]
    initial: dict[str, Any]
    call: dict[str, Any]
    act: str = Field(
        description='What approving the call does ("charges $5.00 to acct-42 (card)"), '
        "when it costs money or its policy is RECONCILE_FIRST or NEVER: an approval must "
        "then carry `confirm_act: true` in its answer. Empty when no tick is needed."
    )
    digest: str = Field(
        description="The fingerprint of what this gate shows (its question, details, call, "
        "form and initial values, and the opening it answers); an answer sends it back."
    )
    role: str
    quorum: int
    deadline: datetime | None
    status: str
    answer: dict[str, Any] | None
    answered_by: str
    answered_at: datetime | None
    votes: list[dict[str, Any]]
    # Asked again after its target refused the call: the refused attempts, oldest first
    # (answer, by, error, key, asked_by).
    attempts: list[dict[str, Any]] = []
    created_at: datetime


class GatePage(Schema):
    items: list[GateOut]
    next_after: int | None


class AnswerIn(Schema):
    """The gate's form, filled in: field name → value (as the gate page posts them), and the
    digest of the gate as it was read (required): a gate that changed since is a 409 with its
    fresh digest, and nothing is recorded."""

    answer: dict[Annotated[str, StringConstraints(max_length=64)], Any] = Field(max_length=50)
    digest: str = Field(
        max_length=64,
        description="Required: the gate's `digest` as read (GET /gates/{id}). A different "
        "one (the gate changed, or it was never read) is refused with 409 and the fresh "
        "`digest`; nothing is recorded.",
    )


class AnsweredOut(Schema):
    gate: GateOut
    # Whether this answer settled the gate (its quorum reached): the stage goes on.
    final: bool
    missing: int

"""What the API takes and gives, as pydantic models: the OpenAPI schema's components. Money is
one type, `Money`: a decimal string at the places every face shows it with (runs/quantities.py:
cents, "5.00", or four places when it has a fraction of a cent, "0.0010"), exact; a token
count is `Tokens`, an integer. A run is named by its public id, "run-12"."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from ninja import Field, Schema
from ninja.responses import codes_4xx
from pydantic import (
    BaseModel,
    ConfigDict,
    PlainSerializer,
    PlainValidator,
    StringConstraints,
    WithJsonSchema,
)

from runs import quantities
from runs.ledger.reasons import MAX_REASON_CHARS
from runs.pipeline import MAX_TEXT_CHARS

Money = Annotated[
    Decimal,
    PlainSerializer(quantities.amount, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^-?[0-9]+\.[0-9]{2}([0-9]{2})?$",
            "description": "USD, exact: cents, or four places when the amount has a "
            "fraction of a cent",
            "examples": ["5.00", "0.0010"],
        }
    ),
]
Tokens = Annotated[int, Field(ge=0, description="a count of a model's tokens")]

Mode = Literal["strict", "upgrade"]
Fingerprint = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
RunId = Annotated[str, StringConstraints(max_length=40)]
SHORT = MAX_TEXT_CHARS


def _input_value(value: Any) -> Any:
    """One error that says what an input may be: as a union of three types, a number was
    refused three times over, once per type, in pydantic's names for them."""
    if isinstance(value, dict | list):
        return value
    if not isinstance(value, str):
        raise ValueError('an input is text (a number as text: "42"), a JSON object or a list')
    if len(value) > SHORT:
        raise ValueError(f"an input's text is at most {SHORT:,} characters")
    return value


InputValue = Annotated[
    Any,
    PlainValidator(_input_value),
    WithJsonSchema(
        {"anyOf": [{"type": "string", "maxLength": SHORT}, {"type": "object"}, {"type": "array"}]}
    ),
]


class Body(Schema):
    """A request's body: a field it does not have is a 422 naming it, never dropped unsaid
    (`{"input": ...}` for `inputs` would otherwise start a run with every default)."""

    model_config = ConfigDict(extra="forbid")


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
    resume_money: Money
    fresh_money: Money
    resume_calls: int
    fresh_calls: int


class StopOut(Schema):
    """Why a run needs a human, as the inbox says it."""

    why: list[str]
    stopped_at: datetime | None
    plan: StoredPlanFigures | None
    plan_changed: bool
    # A blocked plan: what it waits for, said in place of its price ("blocked: a supervisor
    # must settle publish/promote-charge before any resume"); "" otherwise.
    blocked: str = ""
    # A resumed run (or an upgrade's branch) that stopped again, said so; "" otherwise.
    resume_failed: str = ""


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


class StartIn(Body):
    """The pipeline and its inputs: a version or value as text, a typed input as its JSON
    (an object or a list, checked against the input's schema; its text is taken too). A bad
    input is a 422 naming it in `input`; no run is made."""

    pipeline: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    inputs: dict[Annotated[str, StringConstraints(max_length=64)], InputValue] = Field(
        default_factory=dict, max_length=50
    )


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
    cost: Money
    error: str
    request: dict[str, Any]
    result: Any
    created_at: datetime
    updated_at: datetime


# --- Plans and approvals ---------------------------------------------------------------------


class PlanLineOut(BaseModel):
    """A call of the plan (planner.EffectLine): its price as Money; the rest as computed."""

    model_config = ConfigDict(extra="allow")

    cost: Money


class CostOut(BaseModel):
    """What an option costs (planner.Cost): its calls, its money, its model tokens."""

    model_config = ConfigDict(extra="allow")

    tool_calls: int
    money: Money
    # The part of `money` that model tokens are estimated to cost, and the tokens.
    metered_money: Money = Decimal(0)
    tokens: dict[str, Tokens] = Field(default_factory=dict)


class UpgradeOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    cost: CostOut
    effects: list[PlanLineOut]


class PlanOut(BaseModel):
    """The reconcile plan as the planner computed it (planner.Plan.to_dict()), its money and
    tokens in the API's one representation of each. A plain pydantic model, not a ninja
    Schema (which reads declared fields only): every other field passes through as computed."""

    model_config = ConfigDict(extra="allow")

    effects: list[PlanLineOut]
    cost_resume: CostOut
    cost_fresh: CostOut
    upgrade: UpgradeOut


class OptionActsOut(Schema):
    """What one way out does to the outside world (runs/planning/acts.py), as every face
    says it."""

    acts: list[str] = Field(
        description='Its acts in the tools\' own verbs and money: "publishes an article", '
        '"charges $5.00 to acct-42 (card)"'
    )
    drift: list[str] = Field(
        description='The drift that makes an upgrade an option: "facts v3 → v4"'
    )
    kept: list[str] = Field(description='What a strict resume keeps pinned: "facts v3"')
    does: str = Field(description="The sentence the run page's bar shows beside the button")
    confirm: str = Field(description="The sentence its confirmation ticks")


class PlanActsOut(Schema):
    strict: OptionActsOut
    upgrade: OptionActsOut


class StoredPlanOut(Schema):
    run: str
    fingerprint: str
    run_version: int
    computed_at: datetime
    # False when the run moved since the plan was computed: ask the targets again.
    current: bool
    plan: PlanOut
    acts: PlanActsOut


class ReasonIn(Body):
    """A person's reason, recorded in the run's chain as they gave it (runs/ledger/reasons.py
    checks it again: a blank one is refused there)."""

    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS)


class ApproveIn(Body):
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
    resume_money: Money
    # What each run's options do outside, as one run's plan says it (without the targets each
    # run names for itself).
    acts: PlanActsOut | None = None


class GroupList(Schema):
    groups: list[GroupOut]
    # Runs that need a human whose plan is not stored yet: they join a group once it is.
    unplanned: int


class MemberOut(Schema):
    run: str
    fingerprint: str
    status: str
    current_stage: str
    resume_money: Money


class GroupDetailOut(GroupOut):
    runs: list[MemberOut]


class GroupApproveIn(Body):
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
    # Asked again: the earlier attempts, oldest first (answer, by, asked_by; a refused call's
    # error, key, target; a question's sent_back).
    attempts: list[dict[str, Any]] = []
    created_at: datetime


class GatePage(Schema):
    items: list[GateOut]
    next_after: int | None


class AnswerIn(Body):
    """The gate's form, filled in: field name → value (as the gate page posts them), and the
    digest of the gate as it was read (required): a gate that changed since is a 409 with its
    fresh digest, and nothing is recorded. A field the form does not have, in the answer or
    beside it, is a 422: never dropped unsaid."""

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

"""The run protocol's vocabulary: one frozen dataclass per event type, holding that event's
payload as fields, and the one reader of a stored event (`read`).

May import: models.

Every writer builds its event through its class and hands it to the one append path
(`runs.ledger.append.append(writer, event, …)`); every reader turns a stored `Event` row
back into its class with `read()`, or asks the database about payload fields through the
query helpers at the end of this module. Nothing else in `runs/` reads a payload by key
(tests/test_events.py counts).

The protocol's event record (../shared/PROTOCOL.md) maps onto the `Event` row and these
classes: run id, `seq`, the hash chain and the time are the ledger's; `type` is the class's;
`stage`, the input versions it ran against (`input_versions`, the `inputs` column), the
artifacts it references (`artifact_refs`, `artifacts`) and the call's idempotency key
(`idempotency_key`) are fields of the classes they apply to; the payload reference is the
row's `payload_ref`, set by the ledger when a payload is too large to keep inline.

How a class meets its payload, the same rule for every class:

* a field is a payload key of the same name (`Interrupted.job_stage`, whose key is "stage",
  is the one exception: the key names the stage a lost job was queued for);
* a field without a default is always written; a field with one is left out while it holds
  its default, so a payload holds what its writer said and nothing more;
* reading, a key the payload lacks reads as the field's default, or as the empty value of
  its type ("", 0, False, {}, [], None); a key no class knows any more is ignored.

Readers are versioned by that rule: the chain forbids rewriting an event, so every shape
earlier code wrote must still read. Each class lists the shapes its type has had (`SHAPES`,
oldest first, with the commit that changed it); tests/support/stored_events.json holds one
payload of each, and tests/test_events.py reads them all.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields
from itertools import islice
from typing import Any, ClassVar

from django.db.models import Q
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from runs.models import Artifact, Effect, Event, EventType, Gate

__all__ = [
    "CLASSES",
    "TOKEN_KINDS",
    "RunEvent",
    "Unreadable",
    "effect_names",
    "flag",
    "gate_names",
    "holding",
    "present",
    "read",
    "read_payload",
    "shown",
    "shown_payload",
    "sql_text",
    "sql_text_at",
    "sql_true",
    "stored_body",
    "summarize",
    "text",
    "text_at",
    "where",
]

# The row's columns a class may carry beside its payload; never payload keys.
COLUMNS = frozenset({"stage", "idempotency_key", "input_versions", "artifact_refs"})
# What an absent key reads as, by the type a field is annotated with (the first word).
EMPTY = {"str": str, "int": int, "bool": bool, "float": float, "dict": dict, "list": list}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEvent:
    """What every event has: its type (the class's) and its stage ("" for a run-wide one).
    The protocol's other fields are the classes' where they apply; elsewhere they read as
    empty."""

    type: ClassVar[str]
    SHAPES: ClassVar[tuple[str, ...]] = ()
    # (attribute, payload key, default or MISSING), built once per class (_vocabulary).
    _fields: ClassVar[tuple[tuple[str, str, Any], ...]]
    _columns: ClassVar[frozenset[str]]

    stage: str = ""

    @property
    def idempotency_key(self) -> str:
        return ""

    @property
    def input_versions(self) -> dict[str, Any]:
        return {}

    @property
    def artifact_refs(self) -> list[str]:
        return []

    def about(self) -> str:
        """What a one-line summary of the event names: its call, else its reason, else its
        error ("" when it has none of them)."""
        for name in ("call", "reason", "error"):
            value = getattr(self, name, None)
            if value:
                return str(value)
        return ""

    def body_refs(self) -> list[str]:
        """The artifacts its recorded exchanges keep large bodies in (runs/ledger/exchanges.py):
        each request's and response's `body_ref`."""
        refs = []
        for name in ("exchanges", "reconcile"):
            for record in getattr(self, name, None) or ():
                for side in ("request", "response"):
                    part = record.get(side) if isinstance(record, dict) else None
                    if isinstance(part, dict) and isinstance(part.get("body_ref"), str):
                        refs.append(part["body_ref"])
        return refs

    def to_payload(self) -> dict[str, Any]:
        """The payload this event stores: every field without a default, and every other
        one that does not hold its default."""
        payload = {}
        for name, key, default in self._fields:
            value = getattr(self, name)
            if default is MISSING or value != default:
                payload[key] = value
        return payload

    @classmethod
    def payload_keys(cls) -> dict[str, str]:
        """Payload key -> the field that holds it."""
        return {key: name for name, key, _ in cls._fields}

    @classmethod
    def from_payload(cls, payload: dict[str, Any], **columns: Any) -> RunEvent:
        """The event a payload of any shape this type has had says; `columns`, the row's
        columns this class carries."""
        values = {name: columns[name] for name in cls._columns if name in columns}
        for name, key, default in cls._fields:
            if key in payload:
                values[name] = payload[key]
            elif default is MISSING:
                values[name] = _empty(cls, name)
        return cls(**values)


def _empty(cls: type, name: str) -> Any:
    """What a field without a default reads as when its key is absent."""
    annotation = cls.__dataclass_fields__[name].type
    if "None" in annotation:
        return None
    maker = EMPTY.get(annotation.split("[")[0].strip())
    return maker() if maker else None


CLASSES: dict[str, type[RunEvent]] = {}


def _vocabulary(cls: type) -> type[RunEvent]:
    """Make `cls` a frozen dataclass, know its payload's keys, and register it for its
    type."""
    cls = dataclass(frozen=True, slots=True, kw_only=True)(cls)
    encoding = []
    for f in fields(cls):
        if f.name in COLUMNS:
            continue
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        encoding.append((f.name, f.metadata.get("key", f.name), default))
    cls._fields = tuple(encoding)
    cls._columns = frozenset(f.name for f in fields(cls) if f.name in COLUMNS)
    CLASSES[cls.type] = cls
    return cls


# --- a run's life ------------------------------------------------------------------------


@_vocabulary
class RunCreated(RunEvent):
    """A run pinned its inputs; a branch also says what it branched from and the contract of
    its plan's calls."""

    type = EventType.RUN_CREATED
    SHAPES = (
        "5007080..f0ddead: stages, and the run's fault options (now the demo's own table)",
        "b29f1cd..8945209: a branch without its contract",
        "8945209: stages, or a branch with its contract",
    )
    input_versions: dict[str, Any] = field(default_factory=dict)
    stages: list[str] | None = None
    branched_from: str = ""
    checkpoint: str | None = None
    upgraded: dict[str, list[str]] | None = None
    warnings: list[Any] | None = None
    contract: dict[str, Any] | None = None

    def to_payload(self) -> dict[str, Any]:
        if not self.branched_from:
            return RunEvent.to_payload(self)
        # A branch says where it came from even when it starts from no checkpoint.
        return {
            "branched_from": self.branched_from,
            "checkpoint": self.checkpoint,
            "upgraded": self.upgraded or {},
            "warnings": self.warnings or [],
            **({"contract": self.contract} if self.contract is not None else {}),
        }


@_vocabulary
class Started(RunEvent):
    """A worker took the lease and consumed the stage's ticket."""

    type = EventType.STARTED
    SHAPES = ("5007080: worker, token, attempt", "487ab86: and the trace, when tracing is on")
    input_versions: dict[str, Any] = field(default_factory=dict)
    worker: str
    token: int
    attempt: int
    trace: dict[str, str] | None = None


@_vocabulary
class Verified(RunEvent):
    """A stage's output passed its rules; its checkpoint is sealed on this event."""

    type = EventType.VERIFIED
    SHAPES = (
        "5007080: rules, next_stage",
        "03b8c65: and the manifest's hash",
        "d40de8d: and the stage's usage",
    )
    input_versions: dict[str, Any] = field(default_factory=dict)
    artifact_refs: list[str] = field(default_factory=list)
    rules: list[dict[str, Any]]
    next_stage: str
    manifest_sha256: str
    usage: dict[str, Any]


@_vocabulary
class Failed(RunEvent):
    """The stage failed: an exception, its output refused by a rule, a call whose outcome is
    unknown or conflicting, a gate that timed out, a decision that refused a call."""

    type = EventType.FAILED
    SHAPES = (
        "5007080: error, and rules or the call's",
        "4a9e392: or the gate's",
        "889d3e0: a call's says whether it timed out, a verification's its failed_rules",
    )
    idempotency_key: str = ""
    error: str
    call: str = ""
    tool: str = ""
    status: str = ""
    # A verification's: each rule's result, and the names of those that failed (None on a
    # FAILED written before 889d3e0: its rules say which failed).
    rules: list[dict[str, Any]] | None = None
    failed_rules: list[str] | None = None
    gate: str = ""
    # Whether the answer did not come in the time allowed: a call's (True or False) and a
    # gate's (True); None where the FAILED does not say (a stage's, or one written before).
    timed_out: bool | None = None
    exchanges: list[dict[str, Any]] | None = None

    def failed_rule_names(self) -> list[str] | None:
        """The names of the rules a stage's output failed, or None when this is not a
        verification's failure. One written before 889d3e0 has them in its `rules` (each
        rule's name and whether it passed), which only a verification writes."""
        if isinstance(self.failed_rules, list):
            return [str(name) for name in self.failed_rules]
        if isinstance(self.rules, list):
            return [
                str(r.get("name"))
                for r in self.rules
                if isinstance(r, dict) and not r.get("passed")
            ]
        return None


@_vocabulary
class Interrupted(RunEvent):
    """The sweeper (or a worker whose database came back) found the run's work gone: what it
    found, each value as text, and the call in flight."""

    type = EventType.INTERRUPTED
    SHAPES = ("5007080: reason, last_seq and what was found", "dbc647c: and the call in flight")
    reason: str
    last_seq: int
    call: str = ""
    tool: str = ""
    # A lost worker's lease.
    holder: str = ""
    token: str = ""
    last_heartbeat: str = ""
    lease_expired_at: str = ""
    # A lost queued job.
    job_stage: str = field(default="", metadata={"key": "stage"})
    job_state: str = ""
    queued_at: str = ""
    job_started_at: str = ""
    # A worker someone saw die.
    exitcode: str = ""
    seen_by: str = ""


@_vocabulary
class NeedsApproval(RunEvent):
    """The engine stopped before a call a human must decide about."""

    type = EventType.NEEDS_APPROVAL
    idempotency_key: str = ""
    error: str
    reconcile: list[dict[str, Any]] | None = None
    # Why, for machines (a replay.StopKind code; "" before codes were written here), and the
    # call it stopped before where it names one (a divergence).
    kind: str = ""
    call: str = ""


@_vocabulary
class Succeeded(RunEvent):
    type = EventType.SUCCEEDED


# --- calls ---------------------------------------------------------------------------------


@_vocabulary
class ToolCalled(RunEvent):
    """A call's intent, written before the call (with its effect row, for an effect)."""

    type = EventType.TOOL_CALLED
    idempotency_key: str = ""
    call: str
    tool: str
    policy: str
    # None only when read from a stored payload's summary, which leaves the arguments out.
    args: dict[str, Any] | None
    target: str | None = None
    reconcile: list[dict[str, Any]] | None = None


# The kinds of tokens a metered call's usage counts (a model's: the cached are part of the
# prompt).
TOKEN_KINDS = ("prompt", "completion", "cached")


@_vocabulary
class ToolResult(RunEvent):
    """What a call came to: a SAFE call's result, an effect's outcome, a confirmed effect
    reused, an abandoned one skipped."""

    type = EventType.TOOL_RESULT
    SHAPES = (
        "5007080: safe, confirmed, reused, skipped",
        "ccba6ab: a metered call's usage",
        "h45b: and its model, for spend by model",
    )
    idempotency_key: str = ""
    call: str
    tool: str
    status: str = ""
    external_id: str | None = None
    result: Any = None
    cost: str = ""
    # A metered call's tokens (prompt, completion, cached) and the model that used them.
    usage: dict[str, int] = field(default_factory=dict)
    model: str = ""
    duration_ms: int | None = None
    reused: bool = False
    skipped: bool = False
    reason: str = ""
    error: str = ""
    exchanges: list[dict[str, Any]] | None = None
    # A stage run again in the same run returned what it recorded before, without a call
    # (the result itself is in the earlier TOOL_RESULT: runs/planning/replay_log.py).
    replayed: bool = False


@_vocabulary
class Diverged(RunEvent):
    """A stage run again in the same run asked for a call it had made, with another request:
    what differs, and whether the stage stopped before anything was sent."""

    type = EventType.DIVERGED
    idempotency_key: str = ""
    call: str
    tool: str
    policy: str
    # The key the call was made under before ("" for a SAFE call).
    recorded_key: str = ""
    # Each difference: {"path": "messages[0].content", "recorded": …, "asked": …}, cut short.
    diff: list[dict[str, Any]]
    stopped: bool
    reason: str


@_vocabulary
class ValueRecorded(RunEvent):
    """A value a stage took from the world (ctx.now(), ctx.uuid()), replayed whenever the
    stage runs again in the same run."""

    type = EventType.VALUE_RECORDED
    # "now-1", "uuid-2": its kind and the how-manieth of its kind in the stage.
    name: str
    value: str


@_vocabulary
class Reconciled(RunEvent):
    """The target was found to hold what the effect asked for: confirmed without a call."""

    type = EventType.RECONCILED
    idempotency_key: str = ""
    call: str
    tool: str
    found: bool
    external_id: str
    detail: str
    exchanges: list[dict[str, Any]] | None = None


# --- resuming ------------------------------------------------------------------------------


@_vocabulary
class PlanApproved(RunEvent):
    type = EventType.PLAN_APPROVED
    SHAPES = ("b29f1cd", "fe31097: and the batch that approved it")
    action: str
    fingerprint: str
    checkpoint: str | None
    next_stage: str
    reexecute: list[str]
    by: str
    batch: str = ""


@_vocabulary
class Resumed(RunEvent):
    type = EventType.RESUMED
    SHAPES = ("b29f1cd: without a contract", "8945209: with the plan's contract")
    mode: str
    checkpoint: str | None
    next_stage: str
    pinned_inputs: dict[str, Any]
    contract: dict[str, Any] | None = None


@_vocabulary
class Branched(RunEvent):
    """The parent of an upgrade branch, superseded by it."""

    type = EventType.BRANCHED
    branch: str
    checkpoint: str | None
    inputs: dict[str, Any]
    warnings: list[Any]


@_vocabulary
class PlanKept(RunEvent):
    """Resumed work that kept to its plan, priced as it promised."""

    type = EventType.PLAN_KEPT
    fingerprint: str
    mode: str
    promised: dict[str, Any]
    used: dict[str, Any]
    gates: dict[str, int] | None = None


@_vocabulary
class PlanDeviated(RunEvent):
    """Resumed work that departed from its plan: why, and what was used against it."""

    type = EventType.PLAN_DEVIATED
    reason: str
    fingerprint: str = ""
    mode: str = ""
    promised: dict[str, Any] | None = None
    used: dict[str, Any] | None = None
    difference: dict[str, Any] | None = None


# --- people --------------------------------------------------------------------------------


@_vocabulary
class LedgerEdited(RunEvent):
    """A supervisor's correction of an effect row: before, after, why."""

    type = EventType.LEDGER_EDITED
    idempotency_key: str = ""
    effect: int
    call: str
    tool: str
    before: dict[str, Any]
    after: dict[str, Any]
    reason: str
    by: str


@_vocabulary
class Acknowledged(RunEvent):
    type = EventType.ACKNOWLEDGED
    deviation_seq: int | None
    reason: str
    by: str


@_vocabulary
class TargetAsked(RunEvent):
    """What an effect's target answered when a supervisor asked it."""

    type = EventType.TARGET_ASKED
    idempotency_key: str = ""
    effect: int
    call: str
    tool: str
    target: str
    by: str
    found: bool
    matches: bool
    external_id: str
    detail: str
    error: str
    exchanges: list[dict[str, Any]]


@_vocabulary
class ClosedOut(RunEvent):
    type = EventType.CLOSED_OUT
    reason: str
    by: str
    previous_status: str
    unsettled: list[dict[str, str]]
    gates_closed: list[str]


# --- gates -------------------------------------------------------------------------------


@_vocabulary
class GateOpened(RunEvent):
    """A stage asked a human (its question, or a call to confirm) and the run waits."""

    type = EventType.GATE_OPENED
    SHAPES = (
        "4a9e392",
        "d18dbfd: and the gate's details",
        "310fad0..: and where a question's form class is (its clean() rules the answer)",
    )
    gate: str
    kind: str
    subject: str
    question: str
    details: str
    form: list[dict[str, Any]]
    form_class: str = ""
    initial: dict[str, Any]
    call: dict[str, Any]
    role: str
    quorum: int
    on_timeout: dict[str, Any]
    escalate_to: str
    timeout_seconds: float | None
    usage: dict[str, Any]


@_vocabulary
class HumanAnswered(RunEvent):
    """One person's answer (a gate may need several), or the time-out's default."""

    type = EventType.HUMAN_ANSWERED
    SHAPES = ("4a9e392", "733e80e: and the user who voted", "04bf66c: and a time-out's mark")
    gate: str
    kind: str
    subject: str
    by: str
    answer: dict[str, Any]
    diff: dict[str, Any]
    final: bool
    votes: int
    quorum: int
    user: int | None = None
    timed_out: bool = False


@_vocabulary
class GateReopened(RunEvent):
    """A gate asked again: a confirmation after its target refused the answered call, or a
    question whose answer sent its stage back (`refused` then holds that answer and
    `sent_back`, no effect)."""

    type = EventType.GATE_REOPENED
    SHAPES = ("0d1ab4f: a confirmation's refused call", "a19ba91..: or a question's sent back")
    gate: str
    kind: str
    subject: str
    refused: dict[str, Any]
    by: str
    timeout_seconds: float | None


# --- naming the row an event is about -----------------------------------------------------


def effect_names(effect: Effect) -> dict[str, Any]:
    """The fields by which an event about an effect names it: its stage, its call and tool,
    and its delivery key as the event's idempotency key."""
    return {
        "stage": effect.stage,
        "idempotency_key": effect.delivery_key,
        "call": effect.call_id,
        "tool": effect.tool,
    }


def gate_names(gate: Gate) -> dict[str, Any]:
    """The fields by which an event about a gate names it: its stage, its id, its kind and
    the subject it asks about."""
    return {"stage": gate.stage, "gate": gate.gate_id, "kind": gate.kind, "subject": gate.subject}


# --- reading a stored event -------------------------------------------------------------

# A payload above RESUMER_INLINE_PAYLOAD_BYTES goes to an artifact, and the event holds
# {"stored_as": uri, "bytes": n, "summary": {...}}: the fields that say what it was (which
# effect and call, the tool, its outcome, who and why, the branch, how long it took and what
# it cost), cut short; a page shows a stored payload by these and no others. The summary is part of the event's hashed content, so what a row says (which call,
# which outcome, a ledger edit's before → after and the start of its reason) stays on the
# page and under the chain however large the rest was. Before 773e3c6 there was no summary.
STORED_AS = "stored_as"
ROW_FIELDS = (
    "effect",
    "call",
    "tool",
    "status",
    "external_id",
    "reused",
    "skipped",
    "error",
    "reason",
    "action",
    "by",
    "branch",
    "duration_ms",
    "cost",
    "model",
)
# A ledger edit's values before and after (three fields today), and a metered call's usage
# (three token counts): a few scalar entries each.
CHANGE_FIELDS = ("before", "after", "usage")
CHANGE_ENTRIES = 4
NAME_CHARS = 40
TEXT_CHARS = 200


class Unreadable(LookupError):
    """A payload stored as an artifact whose artifact is gone or is not JSON."""


def stored_body(uri: str, size: int, payload: dict[str, Any]) -> dict[str, Any]:
    """What an event holds inline when its payload went to the artifact `uri`."""
    return {STORED_AS: uri, "bytes": size, "summary": summarize(payload)}


def _short(value: Any) -> Any:
    """A scalar as the row shows it; None for what the row does not show (lists, dicts)."""
    if isinstance(value, str):
        return value if len(value) <= TEXT_CHARS else value[:TEXT_CHARS] + "…"
    if isinstance(value, bool | int | float):
        return value
    return None


def summarize(payload: dict[str, Any]) -> dict[str, Any]:
    """The row's fields of `payload`. Bounded whatever the payload holds: at most
    len(ROW_FIELDS) + len(CHANGE_FIELDS) * CHANGE_ENTRIES values of TEXT_CHARS characters."""
    summary = {}
    for key in ROW_FIELDS:
        value = _short(payload.get(key))
        if value is not None:
            summary[key] = value
    for key in CHANGE_FIELDS:
        values = payload.get(key)
        if isinstance(values, dict):
            entries = (
                (str(name)[:NAME_CHARS], _short(value))
                for name, value in values.items()
                if _short(value) is not None
            )
            summary[key] = dict(islice(entries, CHANGE_ENTRIES))
    return summary


def read(event: Event, *, whole: bool = False) -> RunEvent:
    """The stored event as its class (read_payload() of its row). Columns the query did not
    load read as empty."""
    loaded = event.__dict__
    return read_payload(
        event.type,
        event.payload,
        whole=whole,
        stage=loaded.get("stage", ""),
        idempotency_key=loaded.get("idempotency_key", ""),
        input_versions=loaded.get("inputs") or {},
        artifact_refs=loaded.get("artifacts") or [],
    )


def read_payload(type: str, payload: Any, *, whole: bool = False, **columns: Any) -> RunEvent:
    """The one reader: an event of `type` with this stored payload as its class, from any
    shape the type has had. A payload stored as an artifact reads as what its row shows
    (shown_payload()), or `whole`, from the artifact (Unreadable when it cannot be).
    `columns`: the row's stage, idempotency_key, input_versions, artifact_refs."""
    payload = payload if isinstance(payload, dict) else {}
    if STORED_AS in payload:
        payload = _artifact_payload(str(payload[STORED_AS])) if whole else shown_payload(payload)
    return CLASSES[type].from_payload(payload, **columns)


def shown(event: Event) -> dict[str, Any]:
    """The event's payload as a timeline row shows it (shown_payload())."""
    return shown_payload(event.payload)


def shown_payload(payload: Any) -> dict[str, Any]:
    """A stored payload as a timeline row shows it: inline, or a stored one's summary. One
    stored before summaries were kept is summarised from its artifact now ({} when the
    artifact is gone): who edited the ledger, and why, must still show."""
    payload = payload if isinstance(payload, dict) else {}
    if STORED_AS not in payload:
        return payload
    if isinstance(payload.get("summary"), dict):
        return payload["summary"]
    try:
        return summarize(_artifact_payload(str(payload[STORED_AS])))
    except Unreadable:
        return {}


def _artifact_payload(uri: str) -> dict[str, Any]:
    artifact = Artifact.named(uri)
    if artifact is None:
        raise Unreadable(f"{uri} is not in the artifact table")
    try:
        payload = json.loads(artifact.content())
    except (OSError, ValueError) as exc:
        raise Unreadable(f"{uri} cannot be read ({exc})") from exc
    if not isinstance(payload, dict):
        raise Unreadable(f"{uri} holds no payload")
    return payload


# --- asking the database about payloads --------------------------------------------------


def _key(classes: tuple[type[RunEvent], ...], name: str) -> str:
    """The payload key of field `name`, which every one of `classes` must have."""
    keys = {key for cls in classes for attr, key, _ in cls._fields if attr == name}
    if len(keys) != 1 or not all(any(a == name for a, _, _ in c._fields) for c in classes):
        raise ValueError(f"{name} is not a payload field of {[c.__name__ for c in classes]}")
    return keys.pop()


def where(*classes: type[RunEvent], **values: Any) -> Q:
    """Events of these classes whose payload holds these field values."""
    return Q(
        type__in=[cls.type for cls in classes],
        **{f"payload__{_key(classes, name)}": value for name, value in values.items()},
    )


def holding(cls: type[RunEvent], name: str, key: str) -> Q:
    """Events of `cls` whose field `name` (an object) has `key`."""
    return Q(type=cls.type, **{f"payload__{_key((cls,), name)}__has_key": key})


def text(name: str, *classes: type[RunEvent]) -> Coalesce:
    """Field `name` of these classes as text, inline or in a stored payload's summary."""
    key = _key(classes, name)
    return Coalesce(KT(f"payload__{key}"), KT(f"payload__summary__{key}"))


def text_at(name: str, key: str, *classes: type[RunEvent]) -> Coalesce:
    """Entry `key` of field `name` (an object) as text, inline or in a stored payload's
    summary: a metered call's tokens of one kind (`text_at("usage", "prompt", ToolResult)`)."""
    field_key = _key(classes, name)
    return Coalesce(KT(f"payload__{field_key}__{key}"), KT(f"payload__summary__{field_key}__{key}"))


def flag(name: str, *classes: type[RunEvent]) -> Q:
    """Field `name` is true, inline or in a stored payload's summary."""
    key = _key(classes, name)
    return Q(**{f"payload__{key}": True}) | Q(**{f"payload__summary__{key}": True})


def present(name: str, *classes: type[RunEvent]) -> Q:
    """Field `name` was written (it does not hold its default), inline or in a summary."""
    key = _key(classes, name)
    return Q(payload__has_key=key) | Q(payload__summary__has_key=key)


# JSON in raw SQL, per vendor: a field as text, and a field that is JSON true (NULL when
# absent). SQLite keeps JSON true as 1.
SQL_TEXT = {"postgresql": "({col} ->> '{key}')", "sqlite": "json_extract({col}, '$.{key}')"}
SQL_TEXT_AT = {
    "postgresql": "({col} #>> '{{{key},{entry}}}')",
    "sqlite": "json_extract({col}, '$.{key}.{entry}')",
}
SQL_TRUE = {
    "postgresql": "(({col} -> '{key}') = 'true'::jsonb)",
    "sqlite": "(json_extract({col}, '$.{key}') = 1)",
}


def sql_text(vendor: str, column: str, cls: type[RunEvent], name: str) -> str:
    """A raw SQL expression: field `name` of `cls` in the payload `column`, as text."""
    return SQL_TEXT[vendor].format(col=column, key=_key((cls,), name))


def sql_text_at(vendor: str, column: str, cls: type[RunEvent], name: str, key: str) -> str:
    """A raw SQL expression: entry `key` of field `name` (an object) of `cls`, as text, inline
    or in a stored payload's summary."""
    field_key = _key((cls,), name)
    inline = SQL_TEXT_AT[vendor].format(col=column, key=field_key, entry=key)
    path = ("summary," if vendor == "postgresql" else "summary.") + field_key
    summary = SQL_TEXT_AT[vendor].format(col=column, key=path, entry=key)
    return f"COALESCE({inline}, {summary})"


def sql_true(vendor: str, column: str, cls: type[RunEvent], name: str) -> str:
    """A raw SQL expression: field `name` of `cls` in the payload `column` is true."""
    return SQL_TRUE[vendor].format(col=column, key=_key((cls,), name))

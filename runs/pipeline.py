"""The pipeline API: what a user of Resumer writes to make their own agent workflow resumable.

A Pipeline is an ordered list of Stages. A Stage is a function of a Context that returns
a StageOutput; it names the pipeline inputs it consumes (pinned per run), the tools it may
call, and the verification rules its output must pass before a checkpoint is written. A Tool
declares its replay policy and how its delivery key is built. Pipelines are registered by
dotted path in settings.RESUMER_PIPELINES, never hard-wired.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

# A pipeline's inputs live in runs/inputs.py; pipelines import them from here too.
from runs import quantities
from runs.inputs import MAX_TEXT_CHARS as MAX_TEXT_CHARS
from runs.inputs import Input as Input
from runs.inputs import InvalidInput as InvalidInput
from runs.inputs import errors_of
from runs.models import Checkpoint, Effect, GateRole, ReplayPolicy, Run

# What a call comes to besides a result lives in runs/outcomes.py; pipelines import it here.
from runs.outcomes import CallRejected as CallRejected
from runs.outcomes import KeyConflict as KeyConflict
from runs.outcomes import OutcomeUnknown as OutcomeUnknown
from runs.outcomes import ToolRejected as ToolRejected
from runs.outcomes import timed_out as timed_out

# The registry of pipelines lives in runs/registry.py; the engine names it from here too.
from runs.registry import Registry as Registry
from runs.registry import UnknownPipeline as UnknownPipeline
from runs.registry import registry as registry

# A human in the pipeline API lives in runs/review.py; pipelines import it from here too.
from runs.review import Ask as Ask
from runs.review import Confirm as Confirm
from runs.review import OnReject as OnReject
from runs.review import OnTimeout as OnTimeout
from runs.review import Review

if TYPE_CHECKING:  # pydantic is loaded by a pipeline that declares a model, not at start
    from pydantic import BaseModel

KEY_SEPARATOR = "\x1f"


def delivery_key(account: str, platform: str, object_id: str, revision: str) -> str:
    """sha256(account + platform + canonical object id + revision), as the protocol says.

    The parts are joined with a unit separator so that ("ab", "c") and ("a", "bc") differ;
    the scope includes account and platform, so two accounts never look like one delivery,
    and a new revision always gets a new key."""
    parts = [account, platform, object_id, revision]
    if not all(parts):
        raise ValueError("a delivery key needs account, platform, object id and revision")
    return hashlib.sha256(KEY_SEPARATOR.join(parts).encode()).hexdigest()


@dataclass(frozen=True)
class KeyParts:
    account: str
    platform: str
    object_id: str
    revision: str

    @property
    def key(self) -> str:
        return delivery_key(self.account, self.platform, self.object_id, self.revision)

    @property
    def target(self) -> str:
        return f"{self.account}@{self.platform}"


@dataclass(frozen=True)
class Reconciliation:
    """What the external system says about an effect whose outcome the ledger does not know."""

    found: bool
    matches: bool = True
    external_id: str = ""
    result: Any = None
    detail: str = ""


class Context(Protocol):
    """What a stage function, a tool's key function and a call hook may use of the context
    the engine hands them (the engine's StageContext is the one there is). Typed here so
    that pipeline code names the API it writes against, not the engine."""

    @property
    def run(self) -> Run: ...

    @property
    def run_id(self) -> str: ...

    @property
    def root_id(self) -> str:
        """The public id of the run's root: the same across its resumes and branches, so a
        delivery key built from it names the same delivery on every attempt."""
        ...

    @property
    def pipeline(self) -> Pipeline: ...

    @property
    def stage(self) -> str: ...

    @property
    def inputs(self) -> dict[str, Any]:
        """The pipeline inputs the stage consumes, pinned when the run started."""
        ...

    def upstream(self, stage: str) -> Checkpoint:
        """The latest verified checkpoint of an earlier stage (LookupError: none)."""
        ...

    def upstream_artifact(self, stage: str, name: str) -> bytes:
        """An artifact of an earlier stage's checkpoint, checked against its recorded hash."""
        ...

    def call(self, call_id: str, tool_name: str, **args: Any) -> Any:
        """The only way to a tool: through the effect ledger, under the run's lease. Returns
        the tool's result, or None for a call a supervisor abandoned. A tool that requires
        confirmation stops the run before its first call until a human answers; a rejection
        raises CallRejected (is returned as the result with Confirm(on_reject="return"))."""
        ...

    def review(self, call_id: str) -> Review | None:
        """A human's answer about `call_id` (a call or an ask) once this stage used it."""
        ...

    def now(self) -> datetime:
        """The time (UTC), recorded the first time the stage asks and the same whenever the
        stage runs again in this run (after a gate's answer, on a strict resume): a clock in
        a prompt keeps the prompt, and its model turns, what they were."""
        ...

    def uuid(self) -> UUID:
        """A random UUID, recorded on first use and the same whenever the stage runs again
        in this run, as now() is."""
        ...

    def ask(
        self,
        gate_id: str,
        question: str,
        *,
        form: Any = None,
        initial: dict[str, Any] | None = None,
        role: str = GateRole.OPERATOR,
        quorum: int = 1,
        timeout: timedelta | None = None,
        on_timeout: OnTimeout | None = None,
        escalate_to: str = "",
        details: str = "",
    ) -> dict[str, Any]:
        """Ask a human and return their answer (the form's cleaned data, a dict). The first
        time, the run stops and waits (no worker, no lease); the answer queues the stage
        again, and this returns the recorded answer without asking again. `form` is a Django
        form class (default: approve or reject, with notes). The question is the page's
        heading (at most 200 characters); the text to decide on goes in `details` (markdown)."""
        ...

    def converse(
        self,
        loop_id: str,
        *,
        model: str,
        task: str,
        facts: dict[str, Any] | None = None,
        tools: Any = None,
        model_tool: str = "model",
        max_turns: int = 8,
        params: dict[str, Any] | None = None,
        system: str = "",
        output_type: type[BaseModel] | None = None,
        tool_choice: str | None = None,
        output_retries: int = 1,
    ) -> Any:
        """An agent loop (runs/execution/agent_loop.py): the model is asked with `system`
        and the facts first, may request the tools offered (pipeline tools, by name, as Tool
        or as the function a tool() wraps, each through call() with its policy, key and
        gates; an Ask, a question to a human), and answers: in text, or as `output_type`
        (validated; an invalid answer is asked again, `output_retries` times), through a
        final-answer tool under tool_choice="required". Every turn is a recorded call.
        Returns a Conversation (final text, output, messages, turns, tool calls)."""
        ...


@dataclass(frozen=True)
class Tool:
    name: str
    policy: ReplayPolicy
    # call(args, key) performs the call; returns a JSON-able dict. Non-SAFE tools return
    # "external_id" in it.
    call: Callable[[dict[str, Any], str], dict[str, Any]]
    # key(ctx, args) -> KeyParts; required for every policy but SAFE.
    key: Callable[[Context, dict[str, Any]], KeyParts] | None = None
    # reconcile(effect) -> Reconciliation; required for RECONCILE_FIRST, optional otherwise.
    reconcile: Callable[[Effect], Reconciliation] | None = None
    cost: Decimal = Decimal(0)
    # What the call consumes, in the target's terms ("render", "upload", ...), for plans.
    meter: str = ""
    # How a plan names the act ("publish", "charge"): "do not publish again".
    verb: str = "call"
    # A human confirms each first call (True: always, by an operator).
    confirm: Confirm | bool | None = None
    # metered(result) -> (money, tokens): what a call that is billed by what it consumed (a
    # model's tokens) cost, read from its result; `cost` is then the price of the call alone.
    metered: Callable[[dict[str, Any]], tuple[Decimal, dict[str, int]]] | None = None
    # What a plan says about retrying an unknown outcome of this tool under the same key
    # ("may be billed twice: model APIs do not deduplicate"), or, for a NEVER tool, about not
    # retrying it (an agent adapter's tool whose policy was not declared).
    caveat: str = ""
    # The arguments' types and constraints (pydantic): what an edit is checked against.
    args: type[BaseModel] | None = None
    # price(args) -> Decimal: a call priced by its arguments (a charge's amount), not `cost`.
    price: Callable[[dict[str, Any]], Decimal] | None = None
    # What an agent loop tells its model the tool does (else the `args` model's docstring).
    description: str = ""

    @property
    def confirmation(self) -> Confirm | None:
        return Confirm() if self.confirm is True else (self.confirm or None)

    def price_of(self, args: dict[str, Any] | None) -> Decimal:
        return self.cost if self.price is None or args is None else Decimal(self.price(args))

    def check_args(self, args: dict[str, Any]) -> None:
        """The stage's own call is held to the tool's model, as a reviewer's edit is: before
        anything is recorded, asked or sent, arguments the model refuses (an amount of -5
        where it says gt=0) stop the stage with InvalidArguments, and nothing happens."""
        if self.args is None:
            return
        try:
            self.args.model_validate(args)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise InvalidArguments(
                f"tool {self.name}: the arguments do not fit its model ({errors_of(exc)})"
            ) from None

    def __post_init__(self) -> None:
        if self.policy != ReplayPolicy.SAFE and self.key is None:
            raise ValueError(f"tool {self.name}: a {self.policy} tool must declare its key")
        price = quantities.decimal(self.cost)  # "12.00" as text would fail at the first call
        if price is None or price < 0:
            raise ValueError(f"tool {self.name}: cost is a price of 0 or more, not {self.cost!r}")
        object.__setattr__(self, "cost", price)
        if self.policy == ReplayPolicy.RECONCILE_FIRST and self.reconcile is None:
            raise ValueError(f"tool {self.name}: RECONCILE_FIRST needs a reconcile function")
        limits = set(self.confirmation.limits) if self.confirmation else set()
        if limits and (self.args is None or not limits <= set(self.confirmation.editable)):
            raise ValueError(f"tool {self.name}: limits are for editable fields of its args")


class InvalidArguments(ValueError):
    """A call whose arguments its tool's `args` model refuses: nothing was recorded or sent."""


@dataclass(frozen=True)
class Rule:
    """A named predicate over a stage's output; its result is recorded in the checkpoint."""

    name: str
    check: Callable[[StageOutput], bool]

    def evaluate(self, output: StageOutput) -> dict[str, Any]:
        try:
            passed = bool(self.check(output))
            detail = ""
        except Exception as exc:  # a rule that crashes has not passed
            passed, detail = False, f"{type(exc).__name__}: {exc}"
        return {"name": self.name, "passed": passed, "detail": detail}


@dataclass
class StageOutput:
    outputs: dict[str, Any] = field(default_factory=dict)
    # name -> (bytes, content type)
    artifacts: dict[str, tuple[bytes, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """A call a stage is expected to make, for plan estimates before it runs."""

    call_id: str
    tool: str


class OnDivergence(StrEnum):
    """What a stage run again in the same run does when it asks for a call it made before
    with another request (runs/planning/replay_log.py). The divergence is recorded either
    way; STOP stops before a call that costs money or is never guessed about
    (replay.guards_divergence) and leaves the run for a human, with a plan that offers a new
    branch or closing the run out; RECORD makes the new request and goes on."""

    STOP = "stop"
    RECORD = "record"


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Context], StageOutput]
    consumes: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    rules: tuple[Rule, ...] = ()
    calls: tuple[Call, ...] = ()
    # The gates the stage asks with ctx.ask, for plans before it runs.
    asks: tuple[str, ...] = ()
    # What a divergence does in this stage ("" = the pipeline's on_divergence).
    on_divergence: str = ""


@dataclass(frozen=True)
class Pipeline:
    name: str
    stages: tuple[Stage, ...]
    tools: tuple[Tool, ...]
    inputs: tuple[Input, ...] = ()
    description: str = ""
    on_divergence: str = OnDivergence.STOP

    def __post_init__(self) -> None:
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"pipeline {self.name}: stage names must be unique and non-empty")
        tool_names = {t.name for t in self.tools}
        for stage in self.stages:
            missing = set(stage.tools) - tool_names
            if missing:
                raise ValueError(f"stage {stage.name} uses undeclared tools {sorted(missing)}")
        for said in (
            self.on_divergence,
            *(s.on_divergence for s in self.stages if s.on_divergence),
        ):
            if said not in OnDivergence.__members__.values():
                raise ValueError(f"on_divergence must be one of {[str(o) for o in OnDivergence]}")

    def divergence(self, stage: str) -> str:
        """What a divergence does in `stage`: the stage's choice, else the pipeline's."""
        return self.stage(stage).on_divergence or self.on_divergence

    @cached_property
    def stage_names(self) -> tuple[str, ...]:
        # Cached: the append path checks every event's stage against it (a frozen
        # pipeline's stages never change).
        return tuple(s.name for s in self.stages)

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"unknown stage {name!r} for pipeline {self.name!r}")

    def tool(self, name: str) -> Tool:
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(f"unknown tool {name!r} for pipeline {self.name!r}")

    def index(self, stage: str) -> int:
        return self.stage_names.index(stage)

    def next_stage(self, stage: str) -> str:
        i = self.index(stage)
        return self.stage_names[i + 1] if i + 1 < len(self.stages) else ""

    def stages_from(self, stage: str) -> tuple[str, ...]:
        return self.stage_names[self.index(stage) :] if stage else ()

    def resolve_inputs(self, given: dict[str, Any]) -> dict[str, Any]:
        """Pin every declared input: given values are validated (typed ones against their
        schema), missing ones get current(). Raises InvalidInput before anything is written."""
        declared = {i.name: i for i in self.inputs}
        unknown = set(given) - set(declared)
        if unknown:
            raise InvalidInput(
                f"unknown input(s) {', '.join(sorted(unknown))} for pipeline {self.name}; "
                f"it takes: {', '.join(declared) or 'none'}",
                input=sorted(unknown)[0],
            )
        pinned: dict[str, Any] = {}
        for spec in self.inputs:  # declared order, so later inputs may depend on earlier ones
            value = given.get(spec.name)
            if isinstance(value, str) and not value.strip():
                # Given, and blank: an unset shell variable (--input account=$ACCOUNT), not a
                # wish for the default, which leaving the input out asks for (the start page
                # leaves out the fields left blank).
                rest = "leave it out to pin its default" if spec.current else "it is required"
                raise InvalidInput(
                    f"input {spec.name} is blank: give it a value ({rest})", input=spec.name
                )
            if value is not None:
                pinned[spec.name] = spec.pin(value, pinned)
            elif spec.current is None:
                raise InvalidInput(
                    f"input {spec.name} is required: {spec.help or 'give it a value'}",
                    input=spec.name,
                )
            else:
                pinned[spec.name] = spec.pin(spec.current(pinned), pinned, given=False)
        return pinned

    def drift(
        self, pinned: dict[str, str], unresolved: dict[str, str] | None = None
    ) -> dict[str, tuple[str, str]]:
        """Versioned inputs whose current version differs from the pinned one. An input whose
        resolver raises (its source lost the topic) is put in `unresolved` with why, when the
        caller passes a dict for it, instead of raising: a plan can still say what is
        possible without it."""
        changed = {}
        for spec in self.inputs:
            if not spec.versioned or spec.current is None or spec.name not in pinned:
                continue
            try:
                now = spec.current(pinned)
                now = spec.pin(now, pinned, given=False) if spec.schema is not None else now
            except Exception as exc:
                if unresolved is None:
                    raise
                unresolved[spec.name] = str(exc) or type(exc).__name__
                continue
            if now != pinned[spec.name]:
                changed[spec.name] = (pinned[spec.name], now)
        return changed

    def open_stages(self, stages: Iterable[str]) -> list[str]:
        """Of `stages`, those that declare no calls and make theirs as they go (an agent
        loop): what a plan lists of them is what they recorded, and a call they make after it
        continues the plan (planning/contract.py, Contract.open)."""
        return [name for name in stages if not self.stage(name).calls]

    def first_affected(self, changed_inputs: Iterable[str]) -> str:
        """The earliest stage that consumes any of the changed inputs ("" if none does)."""
        changed = set(changed_inputs)
        for stage in self.stages:
            if changed & set(stage.consumes):
                return stage.name
        return ""

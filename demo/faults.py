"""Fault injection for the demo, the tests and the fault matrix: a run started here may crash
its worker, lose a call's answer, stall a call or slow every call down.

    start_run("content", {}, actor="cli", faults={"crash": "visual/upload-cover/before"})

The faults are kept in the demo's own table (RunFaults, keyed by the run) and acted on by
FaultHooks, the call hooks settings.RESUMER_CALL_HOOKS installs (see runs/execution/hooks.py):

    crash    "stage/call/before|after"  the worker dies by SIGKILL there, the way an OOM kill
                                        or a lost machine ends it: no cleanup, no last write
             "stage/gate/before-ask|after-answer"   or around a gate (a question the stage
                                        asks, or a call's confirmation, named by its call):
                                        before it opens, or when the stage runs again and
                                        finds its recorded answer
    timeout  "stage/call/after"         the call happens, its answer never arrives
    stall    {"stage/call": seconds}    sleep before that call (its intent already recorded)
    delay    seconds                    sleep before every call, to watch a run live
    network  {"stage/call": mode}       the demo service fails that call's request, for real:
             drop   it commits, then drops the connection without answering
             late   it commits, then answers after the tool's read time-out
             5xx    it answers 503 before committing anything
             down   the call waits until the service stops answering (someone stops it:
                    a test's ServiceProcess.stop()), then is made against a closed port

Crash, timeout and network faults fire on the run's first attempt only, so an approved resume
gets through. A network fault is armed on the service (POST /_faults) for the call's delivery
key once its intent is recorded, so it takes exactly that call's first request; an IDEMPOTENT
tool's retry with the same key then goes through. An upgrade branch keeps its parent's delay
and nothing else.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from demo.models import RunFaults
from demo_service.process import ServiceClient
from runs.execution import engine
from runs.execution.hooks import CallHooks
from runs.models import Effect, Run
from runs.pipeline import Context, InvalidInput, OutcomeUnknown, Pipeline, registry
from runs.tools.http import spec_of
from runs.tools.model import spec_of as model_spec_of

log = logging.getLogger("demo.faults")

WHEN = ("before", "after")
GATE_WHEN = ("before-ask", "after-answer")
KINDS = ("crash", "timeout", "stall", "delay", "network")
MAX_DELAY = 60
MAX_STALL = 3600
NETWORK_MODES = ("drop", "late", "5xx", "down")
# The demo service's operation behind each of the demo pipeline's HTTP tools.
SERVICE_OPERATIONS = {
    "render_image": "render",
    "upload_asset": "upload",
    "publish_article": "publish",
    "charge_card": "charge",
    # The language model (runs/tools/model.py): its requests carry the delivery key as
    # Idempotency-Key, which the service's faults go by (it deduplicates nothing).
    "model": "chat",
}
# How long a "down" call waits for someone to stop the service before it goes ahead.
MAX_DOWN_WAIT = 120


@dataclass(frozen=True)
class CallPoint:
    """A moment of one call: `stage/call/before` or `stage/call/after`."""

    stage: str
    call: str
    when: str

    @classmethod
    def parse(cls, spec: str, pipeline: Pipeline, *, kind: str = "crash") -> CallPoint:
        parts = spec.split("/")
        if len(parts) != 3:
            raise InvalidInput(f"{kind} point {spec!r} must look like stage/call/before|after")
        stage, call, when = parts
        if stage not in pipeline.stage_names:
            raise InvalidInput(f"{kind} point: unknown stage {stage!r}")
        if kind == "crash" and when in GATE_WHEN:
            return cls._gate(pipeline, stage, call, when)
        known_calls = {c.call_id for c in pipeline.stage(stage).calls}
        # A stage that declares no calls (Stage.calls) cannot be checked: its point is taken
        # as given, and fires if the stage makes that call.
        if known_calls and call not in known_calls:
            raise InvalidInput(
                f"{kind} point: stage {stage} has no call {call!r} "
                f"(it has {', '.join(sorted(known_calls))})"
            )
        if when not in WHEN:
            raise InvalidInput(f"{kind} point: {when!r} is neither 'before' nor 'after'")
        return cls(stage, call, when)

    @classmethod
    def _gate(cls, pipeline: Pipeline, stage: str, gate: str, when: str) -> CallPoint:
        spec = pipeline.stage(stage)
        gates = set(spec.asks) | {
            c.call_id for c in spec.calls if pipeline.tool(c.tool).confirmation is not None
        }
        if gates and gate not in gates:
            raise InvalidInput(
                f"crash point: stage {stage} has no gate {gate!r} "
                f"(it has {', '.join(sorted(gates)) or 'none'})"
            )
        return cls(stage, gate, when)

    def __str__(self) -> str:
        return f"{self.stage}/{self.call}/{self.when}"


def _seconds(value: Any, what: str, most: float) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{what} must be a number of seconds, not {value!r}") from None
    # Checked here, not by time.sleep() halfway through a stage (negative, NaN, a day).
    if not (math.isfinite(seconds) and 0 <= seconds <= most):
        raise InvalidInput(f"{what} must be between 0 and {most:g} seconds")
    return seconds


def validate(pipeline: Pipeline, spec: dict[str, Any]) -> dict[str, Any]:
    """Check a fault spec against the pipeline; return the clean values RunFaults takes."""
    clean: dict[str, Any] = {}
    for kind, value in spec.items():
        if kind == "delay":
            clean["delay"] = _seconds(value, "delay", MAX_DELAY)
        elif kind == "crash":
            clean["crash"] = str(CallPoint.parse(str(value), pipeline))
        elif kind == "timeout":
            point = CallPoint.parse(str(value), pipeline, kind="timeout")
            if point.when != "after":
                raise InvalidInput("timeout point: only 'after' (the answer never arrives)")
            clean["timeout"] = str(point)
        elif kind == "stall":
            if not isinstance(value, dict):
                raise InvalidInput("stall must map stage/call to seconds")
            stalls = {}
            for point, seconds in value.items():
                stage, _, call = str(point).partition("/")
                CallPoint.parse(f"{stage}/{call}/before", pipeline, kind="stall")
                stalls[str(point)] = _seconds(seconds, f"stall {point}", MAX_STALL)
            clean["stall"] = stalls
        elif kind == "network":
            clean["network"] = _network(pipeline, value)
        else:
            raise InvalidInput(f"unknown fault {kind!r} (known: {', '.join(KINDS)})")
    return clean


def _network(pipeline: Pipeline, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise InvalidInput("network must map stage/call to drop, late, 5xx or down")
    clean = {}
    for point, mode in value.items():
        stage, _, call = str(point).partition("/")
        CallPoint.parse(f"{stage}/{call}/before", pipeline, kind="network")
        tool = next((c.tool for c in pipeline.stage(stage).calls if c.call_id == call), "")
        if tool not in SERVICE_OPERATIONS:
            raise InvalidInput(
                f"network fault {point}: {tool} does not call the demo service (these do: "
                f"{', '.join(SERVICE_OPERATIONS)})"
            )
        if mode not in NETWORK_MODES:
            raise InvalidInput(
                f"network fault {point}: {mode!r} is not one of {', '.join(NETWORK_MODES)}"
            )
        clean[str(point)] = str(mode)
    return clean


def start_run(
    pipeline_name: str,
    inputs: dict[str, str] | None = None,
    *,
    actor: str,
    faults: dict[str, Any] | None = None,
    enqueue: bool = True,
) -> Run:
    """engine.start_run() with faults: both are checked before anything is written, and the
    run, its faults and (on commit) its first stage job come together or not at all."""
    clean = validate(registry.get(pipeline_name), dict(faults or {}))
    with transaction.atomic():
        run = engine.start_run(pipeline_name, inputs, actor=actor, enqueue=enqueue)
        if clean:
            RunFaults.objects.create(run=run, **clean)
    return run


class FaultHooks(CallHooks):
    """Acts on the RunFaults of the run whose stage is executing. One instance serves one
    stage job (hooks.installed()), so the faults are read once per stage."""

    def __init__(self) -> None:
        self._faults: dict[int, RunFaults | None] = {}

    def faults_of(self, run: Run) -> RunFaults | None:
        if run.pk not in self._faults:
            self._faults[run.pk] = _lookup(run)
        return self._faults[run.pk]

    def before_call(self, ctx: Context, call_id: str) -> None:
        faults = self.faults_of(ctx.run)
        if faults is None:
            return
        if faults.crash == f"{ctx.stage}/{call_id}/before" and ctx.run.attempt == 0:
            _die(ctx, call_id, "before")
        stall = faults.stall.get(f"{ctx.stage}/{call_id}")
        if stall:
            time.sleep(float(stall))
        if faults.delay:
            time.sleep(faults.delay)
        mode = faults.network.get(f"{ctx.stage}/{call_id}")
        if mode and ctx.run.attempt == 0:
            _network_fault(ctx, call_id, mode)

    def before_ask(self, ctx: Context, gate_id: str) -> None:
        self._crash_at(ctx, gate_id, "before-ask")

    def after_answer(self, ctx: Context, gate_id: str, answer: dict[str, Any]) -> None:
        self._crash_at(ctx, gate_id, "after-answer")

    def _crash_at(self, ctx: Context, gate_id: str, when: str) -> None:
        faults = self.faults_of(ctx.run)
        point = f"{ctx.stage}/{gate_id}/{when}"
        if faults is not None and faults.crash == point and ctx.run.attempt == 0:
            _die(ctx, gate_id, when)

    def after_call(self, ctx: Context, call_id: str, result: Any) -> None:
        faults = self.faults_of(ctx.run)
        if faults is None or ctx.run.attempt != 0:
            return
        if faults.timeout == f"{ctx.stage}/{call_id}/after":
            raise OutcomeUnknown(f"{call_id} did not answer in time", timed_out=True)
        if faults.crash == f"{ctx.stage}/{call_id}/after":
            _die(ctx, call_id, "after")


def _network_fault(ctx: Context, call_id: str, mode: str) -> None:
    """Have the demo service fail this call's request (its intent, and so its delivery key,
    is recorded by now)."""
    effect = (
        Effect.objects.filter(run=ctx.run, stage=ctx.stage, call_id=call_id).order_by("-pk").first()
    )
    if effect is None:  # a SAFE call has no key; validate() refuses those
        return
    service = ServiceClient(settings.DEMO_SERVICE_URL)
    operation = SERVICE_OPERATIONS[effect.tool]
    key = effect.delivery_key
    log.warning("fault injection: %s for %s/%s (%s)", mode, ctx.stage, call_id, operation)
    if mode == "drop":
        service.arm(operation, "drop", key=key)
    elif mode == "late":
        tool = ctx.pipeline.tool(effect.tool)
        spec = spec_of(tool) or model_spec_of(tool)
        late = (spec.read_timeout if spec is not None else 5.0) + 1
        service.arm(operation, "delay", key=key, seconds=late)
    elif mode == "5xx":
        service.arm(operation, "error", key=key, status=503)
    elif mode == "down":
        deadline = time.monotonic() + MAX_DOWN_WAIT
        while service.answers() and time.monotonic() < deadline:
            time.sleep(0.05)


def _lookup(run: Run) -> RunFaults | None:
    faults = RunFaults.objects.filter(run_id=run.pk).first()
    if faults is not None or run.parent_id is None:
        return faults
    # An upgrade branch keeps the demo's pace (its parent's delay), none of its faults.
    parent = _lookup(run.parent)
    return RunFaults(delay=parent.delay) if parent is not None and parent.delay else None


def _die(ctx: Context, call_id: str, when: str) -> None:
    log.error(
        "fault injection: killing worker %s at %s/%s/%s", os.getpid(), ctx.stage, call_id, when
    )
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # pragma: no cover - the signal arrives first

"""OpenTelemetry traces of stage executions and tool calls (docs/monitoring.md).

Off by default. settings.RESUMER_TRACING turns it on; unset, it is on when the standard
environment names an exporter (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
or OTEL_TRACES_EXPORTER other than "none"). OTEL_SDK_DISABLED=true keeps it off. Everything
else comes from the OTEL_* environment, read by the SDK itself: the OTLP/HTTP exporter's
endpoint, headers and time-out, OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES (service.name
defaults to "resumer"), OTEL_TRACES_SAMPLER, OTEL_BSP_* and OTEL_PROPAGATORS.

Off, every helper here returns at its first check (one global read): no span object, no
context switch, no attribute dict, nothing in an event's payload. On:

  * `stage_execution` (a decorator on engine._execute): one span per stage job, its outcome;
  * `started(run, stage)`: what STARTED's payload carries ({"trace": {trace_id, span_id}}),
    and a Link from this attempt's span to the previous attempt of the same stage, read from
    that attempt's STARTED (a resumed stage links to the interrupted one);
  * `tool_call(...)` around DurableCalls.call, with `note(...)` for what is decided inside it
    (the replay action, the delivery key's hash, an outcome) and the outcome derived at exit;
  * `inject(headers)`: `traceparent` for an HTTP tool's request, so the target's trace joins;
  * `model_call(model, provider)`: the GenAI span a model tool makes around its request
    (issue 25 adds the model tool; nothing calls it yet).

Imports only opentelemetry, Django settings, runs.ids and runs.models (STARTED events); the
OTLP exporter only when tracing is on.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from django.conf import settings
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanProcessor,
)
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

from runs import ids
from runs.events import read
from runs.models import Event

RUN = "resumer.run"
PIPELINE = "resumer.pipeline"
STAGE = "resumer.stage"
ATTEMPT = "resumer.stage.attempt"
CALL = "resumer.call.id"
TOOL = "resumer.tool"
POLICY = "resumer.tool.policy"
ACTION = "resumer.replay.action"
OUTCOME = "resumer.outcome"
KEY_HASH = "resumer.delivery_key.sha256"

# A replay action that returned normally, and the outcome it means.
_RETURNED = {
    "re-run": "ok",
    "call": "confirmed",
    "retry-same-key": "confirmed",
    "reuse": "reused",
    "skip": "skipped",
    "record-found": "found",
}
# A stage job's outcomes (engine.Outcome) that mark its span as an error.
_STAGE_ERRORS = frozenset({"failed", "verification-failed", "stopped", "lease-lost", "interrupted"})
# Exceptions by name (no import of the engine here): a gate is not an error.
_RAISED = {
    "StageWaiting": "waiting",
    "StageStopped": "stopped",
    "LeaseLost": "lease-lost",
    "ToolRejected": "failed",
}

_NOTHING = nullcontext()
_configured = False
_tracer: trace.Tracer | None = None


def wanted() -> bool:
    """Whether this process should trace, from the settings and the OTEL_* environment."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(getattr(settings, "RESUMER_TRACING", False))


def configure(
    exporter: SpanExporter | None = None, processor: type[SpanProcessor] | None = None
) -> trace.Tracer | None:
    """Set tracing up (or off) for this process; the first helper used calls it. Tests pass
    an exporter (and SimpleSpanProcessor) to trace into memory; `exporter=None` with tracing
    wanted builds the one OTEL_TRACES_EXPORTER names (otlp by default, or console)."""
    global _configured, _tracer
    _configured, _tracer = True, None
    if exporter is None:
        if not wanted():
            return None
        existing = trace.get_tracer_provider()
        if isinstance(existing, TracerProvider):  # opentelemetry-instrument made one
            _tracer = existing.get_tracer("resumer")
            return _tracer
        exporter = _exporter_from_environment()
        if exporter is None:
            return None
        provider = TracerProvider(resource=_resource())
        provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)  # stage code's own tracers join it
    else:
        provider = TracerProvider(resource=_resource())
        provider.add_span_processor((processor or BatchSpanProcessor)(exporter))
    _tracer = provider.get_tracer("resumer")
    return _tracer


def disable() -> None:
    """Tracing off in this process (tests undo configure() with it)."""
    global _configured, _tracer
    _configured, _tracer = True, None


def _exporter_from_environment() -> SpanExporter | None:
    name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")[0].strip().lower()
    if name == "none":
        return None
    if name == "console":
        return ConsoleSpanExporter()
    # Imported when tracing is on: the exporter brings protobuf and requests, which every
    # process that loads the engine (a command line's start too) would import for nothing.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, time-out: OTEL_EXPORTER_OTLP_*


def _resource() -> Resource:
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    return Resource.create({} if named else {"service.name": "resumer"})


def _active() -> trace.Tracer | None:
    return _tracer if _configured else configure()


def key_hash(key: str) -> str:
    """What a span says of a delivery key: the first 16 hex of its sha256, never the key."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


# --- stages --------------------------------------------------------------------------------


def stage_execution(fn: Callable[..., Any]) -> Callable[..., Any]:
    """engine._execute(run_pk, stage_name, ticket, holder, hooks) in a span, when on."""

    @functools.wraps(fn)
    def traced(run_pk: int, stage_name: str, *args: Any) -> Any:
        tracer = _active()
        if tracer is None:
            return fn(run_pk, stage_name, *args)
        attributes = {RUN: ids.run_id(run_pk), STAGE: stage_name}
        with tracer.start_as_current_span(f"stage {stage_name}", attributes=attributes) as span:
            outcome = fn(run_pk, stage_name, *args)
            said = "database-lost" if outcome is None else str(outcome)
            span.set_attribute(OUTCOME, said)
            if said in _STAGE_ERRORS:
                span.set_status(Status(StatusCode.ERROR, said))
            return outcome

    return traced


def started(run: Any, stage: str) -> dict[str, str] | None:
    """STARTED's trace: this attempt's span ids; the span links to the previous attempt of the
    same stage. None when off (the payload is what it always was)."""
    if _active() is None:
        return None
    span = trace.get_current_span()
    context = span.get_span_context()
    if not context.is_valid:
        return None
    span.set_attributes({RUN: run.public_id, PIPELINE: run.pipeline, ATTEMPT: run.attempt})
    previous = _previous_attempt(run.pk, stage)
    if previous is not None:
        span.add_link(previous, {"resumer.link": "previous attempt"})
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


def _previous_attempt(run_pk: int, stage: str) -> SpanContext | None:
    previous = (
        Event.objects.filter(run_id=run_pk, type=Event.Type.STARTED, stage=stage)
        .order_by("-seq")
        .only("type", "payload")
        .first()
    )
    ids = read(previous).trace if previous is not None else None
    if not isinstance(ids, dict):
        return None
    try:
        return SpanContext(
            trace_id=int(ids["trace_id"], 16),
            span_id=int(ids["span_id"], 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
    except (KeyError, TypeError, ValueError):
        return None


# --- tool calls ----------------------------------------------------------------------------


def tool_call(calls: Any, call_id: str, tool: Any) -> Any:
    """A span around one DurableCalls.call (the GenAI execute_tool span, with Resumer's own
    attributes); a shared no-op context when off."""
    tracer = _active()
    if tracer is None:
        return _NOTHING
    return _tool_span(tracer, calls, call_id, tool)


@contextmanager
def _tool_span(tracer: trace.Tracer, calls: Any, call_id: str, tool: Any) -> Iterator[Any]:
    attributes = {
        RUN: calls.run.public_id,
        STAGE: calls.stage,
        CALL: call_id,
        TOOL: tool.name,
        POLICY: str(tool.policy),
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool.name,
        "gen_ai.tool.call.id": call_id,
    }
    with tracer.start_as_current_span(
        f"execute_tool {tool.name}",
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        if not span.is_recording():  # sampled out
            yield span
            return
        try:
            yield span
        except BaseException as exc:
            outcome = next(
                (_RAISED[c.__name__] for c in type(exc).__mro__ if c.__name__ in _RAISED), "error"
            )
            if OUTCOME not in span.attributes:
                span.set_attribute(OUTCOME, outcome)
            if outcome != "waiting":
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))
            raise
        if OUTCOME not in span.attributes:
            action = span.attributes.get(ACTION, "")
            span.set_attribute(OUTCOME, _RETURNED.get(str(action), "ok"))


def note(*, action: str | None = None, key: str | None = None, outcome: str | None = None) -> None:
    """Set what the tool call's span learns inside it: the replay action decided, the
    delivery key (hashed here), an outcome the exit could not tell. No-op when off."""
    if _tracer is None:
        return
    span = trace.get_current_span()
    if action is not None:
        span.set_attribute(ACTION, str(action))
    if key:
        span.set_attribute(KEY_HASH, key_hash(key))
    if outcome is not None:
        span.set_attribute(OUTCOME, str(outcome))


def inject(headers: dict[str, str]) -> dict[str, str]:
    """Add `traceparent` (and whatever OTEL_PROPAGATORS names) to an HTTP tool's request
    headers, so the target's trace joins the run's. Returns `headers`."""
    if _active() is not None:
        propagate.inject(headers)
    return headers


# --- model calls (GenAI semantic conventions) -----------------------------------------------


class ModelCall:
    """The span of one model request: `usage(input_tokens, output_tokens)` once answered."""

    def __init__(self, span: trace.Span | None) -> None:
        self.span = span

    def usage(self, input_tokens: int, output_tokens: int, response_model: str = "") -> None:
        if self.span is None:
            return
        self.span.set_attributes(
            {"gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens}
        )
        if response_model:
            self.span.set_attribute("gen_ai.response.model", response_model)


@contextmanager
def model_call(model: str, provider: str = "", operation: str = "chat") -> Iterator[ModelCall]:
    """For a model tool (issue 25): a `chat {model}` span, a child of the tool call's, with
    gen_ai.request.model and, through `.usage()`, gen_ai.usage.input/output_tokens."""
    tracer = _active()
    if tracer is None:
        yield ModelCall(None)
        return
    attributes = {"gen_ai.operation.name": operation, "gen_ai.request.model": model}
    if provider:
        attributes["gen_ai.provider.name"] = provider
    with tracer.start_as_current_span(f"{operation} {model}", attributes=attributes) as span:
        yield ModelCall(span)

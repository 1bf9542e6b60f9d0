"""OpenTelemetry traces (runs/tracing.py), read from the SDK's in-memory exporter: the span
tree of a run resumed in this process (a time-out at the cover render, then a strict resume),
its attributes, the link from the resumed attempt to the interrupted one, `traceparent` on
every HTTP tool request, and nothing at all when tracing is off."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from runs import tracing
from runs.models import Effect, Event, Run
from runs.pipeline import registry
from runs.tools.http import spec_of
from tests.support.plans import resumed_inline

STORY = {"timeout": "visual/render-cover/after"}
EVERY_CALL = (
    tracing.RUN,
    tracing.STAGE,
    tracing.CALL,
    tracing.TOOL,
    tracing.POLICY,
    tracing.ACTION,
    tracing.OUTCOME,
)


@pytest.fixture
def in_process(transactional_db, facts, redis_conn) -> None:
    """Committed rows for in-process runs, the demo facts, an empty queue."""


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.configure(exporter, SimpleSpanProcessor)
    yield exporter
    tracing.disable()


@pytest.fixture
def requests_sent(monkeypatch) -> list[tuple[str | None, trace.SpanContext]]:
    """Every request sent through httpx: its traceparent and the span current when it left."""
    sent = []
    real_send = httpx.Client.send

    def send(self, request, **kwargs):
        sent.append(
            (request.headers.get("traceparent"), trace.get_current_span().get_span_context())
        )
        return real_send(self, request, **kwargs)

    monkeypatch.setattr(httpx.Client, "send", send)
    return sent


def children(tools: list, stage_span) -> list[tuple[str, str, str]]:
    return [
        (t.attributes[tracing.CALL], t.attributes[tracing.ACTION], t.attributes[tracing.OUTCOME])
        for t in tools
        if t.parent is not None and t.parent.span_id == stage_span.context.span_id
    ]


def test_a_resumed_run_traces_each_stage_and_call_and_links_the_resumed_attempt(
    in_process, spans, requests_sent
):
    run = resumed_inline(STORY)
    assert run.status == Run.Status.SUCCEEDED
    content = registry.get(run.pipeline)
    finished = spans.get_finished_spans()
    stages = sorted(
        (s for s in finished if s.name.startswith("stage ")), key=lambda s: s.start_time
    )
    tools = [s for s in finished if s.name.startswith("execute_tool ")]
    # A model tool's request is a GenAI "chat <model>" span of its own, inside its call's.
    chats = [s for s in finished if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(stages) + len(tools) + len(chats) == len(finished)
    tool_spans = {t.context.span_id for t in tools}
    assert chats and all(chat.parent.span_id in tool_spans for chat in chats)

    # The tree: a stage job is a root span; each call is its child, in its trace, same stage.
    roots = {s.context.span_id: s for s in stages}
    assert all(s.parent is None for s in stages)
    for call in tools:
        stage = roots[call.parent.span_id]
        assert call.context.trace_id == stage.context.trace_id
        assert call.attributes[tracing.STAGE] == stage.attributes[tracing.STAGE]
        assert set(EVERY_CALL) <= set(call.attributes)
        assert call.attributes[tracing.RUN] == run.public_id
        assert call.name == f"execute_tool {call.attributes[tracing.TOOL]}"
        assert call.attributes["gen_ai.tool.call.id"] == call.attributes[tracing.CALL]

    # Each STARTED carries its attempt's span ids, in the order the stages ran.
    started = Event.objects.filter(run=run, type=Event.Type.STARTED).order_by("seq")
    assert [(e.stage, e.payload["trace"]) for e in started] == [
        (
            s.attributes[tracing.STAGE],
            {"trace_id": f"{s.context.trace_id:032x}", "span_id": f"{s.context.span_id:016x}"},
        )
        for s in stages
    ]

    # The two attempts at visual: the first stopped on the unknown render, the resumed one
    # links to it and reuses what it confirmed.
    first, second = [s for s in stages if s.attributes[tracing.STAGE] == "visual"]
    assert (first.attributes[tracing.OUTCOME], first.status.status_code) == (
        "stopped",
        StatusCode.ERROR,
    )
    assert (first.attributes[tracing.ATTEMPT], second.attributes[tracing.ATTEMPT]) == (0, 1)
    assert children(tools, first)[-1] == ("render-cover", "call", "unknown")
    [link] = second.links
    assert (link.context.trace_id, link.context.span_id) == (
        first.context.trace_id,
        first.context.span_id,
    )
    assert children(tools, second) == [
        ("render-body-1", "reuse", "reused"),
        ("upload-body-1", "reuse", "reused"),
        ("render-body-2", "reuse", "reused"),
        ("upload-body-2", "reuse", "reused"),
        ("render-cover", "retry-same-key", "confirmed"),
        ("upload-cover", "call", "confirmed"),
    ]
    assert second.attributes[tracing.OUTCOME] == "verified"
    assert [s.links for s in stages if s is not second] == [()] * (len(stages) - 1)
    [failed_render] = [t for t in tools if t.status.status_code == StatusCode.ERROR]
    assert failed_render.attributes[tracing.CALL] == "render-cover"

    # The delivery key appears hashed, never itself; nor do the arguments.
    keys = {(e.stage, e.call_id): e.delivery_key for e in Effect.objects.filter(run=run)}
    for call in tools:
        where = (call.attributes[tracing.STAGE], call.attributes[tracing.CALL])
        if where in keys:
            digest = hashlib.sha256(keys[where].encode()).hexdigest()[:16]
            assert call.attributes[tracing.KEY_HASH] == digest
        elif call.attributes[tracing.POLICY] == "SAFE":
            assert tracing.KEY_HASH not in call.attributes
    said = repr([dict(s.attributes) for s in finished])
    assert not any(key in said or key[:16] in said for key in keys.values())

    # traceparent: every request an HTTP tool sent names the span of the call that sent it
    # (version 00, the sampled flag set).
    http_calls = {
        t.context.span_id
        for t in tools
        if spec_of(content.tool(t.attributes[tracing.TOOL]))
        and t.attributes[tracing.OUTCOME] != "reused"  # answered by the ledger: no request
    }
    sent = [(header, ctx) for header, ctx in requests_sent if ctx.span_id in http_calls]
    assert {ctx.span_id for _, ctx in sent} == http_calls
    for header, ctx in sent:
        version, trace_id, span_id, flags = header.split("-")
        assert (version, trace_id, span_id) == ("00", f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
        assert int(flags, 16) & 1


def test_off_by_default_nothing_is_traced_and_payloads_are_unchanged(in_process, requests_sent):
    assert not settings.RESUMER_TRACING
    tracing.disable()
    run = resumed_inline(STORY)

    assert all("trace" not in e.payload for e in Event.objects.filter(run=run))
    assert all(header is None for header, _ in requests_sent)
    assert not trace.get_current_span().get_span_context().is_valid
    # The hot path's whole cost: one shared no-op context manager, no span object.
    assert tracing.tool_call(None, "c", None) is tracing.tool_call(None, "d", None)


def test_a_model_call_carries_the_genai_attributes(spans):
    with tracing.model_call("demo-model-1", "demo") as call:
        call.usage(input_tokens=120, output_tokens=45, response_model="demo-model-1-0425")
    [span] = spans.get_finished_spans()
    assert span.name == "chat demo-model-1"
    assert dict(span.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "demo-model-1",
        "gen_ai.provider.name": "demo",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 45,
        "gen_ai.response.model": "demo-model-1-0425",
    }


def test_a_model_call_with_tracing_off_costs_nothing():
    tracing.disable()
    with tracing.model_call("demo-model-1") as call:
        call.usage(1, 2)
    assert call.span is None


@pytest.mark.parametrize(
    ("environment", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"RESUMER_TRACING": "1"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "RESUMER_TRACING": "0"}, False),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"},
            False,
        ),
    ],
)
def test_tracing_is_on_only_when_the_environment_asks(environment, on):
    """In a fresh process, as a deployment starts: settings and the exporter it builds."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RESUMER_TRACING"))}
    probe = (
        "import django; django.setup()\n"
        "from runs import tracing\n"
        "print(tracing.configure() is not None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**keep, **environment, "DJANGO_SETTINGS_MODULE": "resumer.settings"},
        cwd=Path(settings.BASE_DIR),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(on)

"""Credentials never enter the log (issue 47): the query parameters, headers and JSON body
fields an HTTP tool sends as credentials, by their common names or because the tool marks
them secret, are redacted before its exchanges are recorded, in events, effect rows and
stored bodies alike. (The call's key and request hash are computed from the stage's
arguments, which the redaction never touches.) Stages run in-process against the session's
real demo service."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.core.files.storage import default_storage

from runs import engine
from runs.execution.engine import Outcome
from runs.ledger.exchanges import REDACTED
from runs.models import Artifact, Checkpoint, Effect, Event, ReplayPolicy, Run
from runs.pipeline import KeyParts, Pipeline, Stage, StageOutput
from runs.tools.http import http_tool
from tests.support.pipelines import registered

CANARY = "canary-5f1d9c2e"


def _render(ctx) -> StageOutput:
    image = ctx.call("render", "render", prompt=f"cover of {ctx.root_id}")
    return StageOutput(outputs={"image": image["external_id"]})


secret_pipeline = Pipeline(
    name="http-secrets",
    tools=(
        http_tool(
            "render",
            ReplayPolicy.IDEMPOTENT,
            url="/v1/renders",
            base_url=lambda: settings.DEMO_SERVICE_URL,
            params=lambda args: {"api_key": CANARY, "size": "large"},
            headers=lambda: {"X-Request-Id": CANARY},
            body=lambda args, key: {
                "prompt": args["prompt"],
                "signature": CANARY,
                "account_pin": CANARY,
                # Large enough to be kept as a stored body, not inline.
                "notes": "n" * 4096,
            },
            key=lambda ctx, args: KeyParts("acct-secrets", "renderer", ctx.root_id, "r1"),
            external_id="id",
            target="renderer",
            secret=("x-request-id", "account_pin"),
        ),
    ),
    stages=(Stage("render", _render, tools=("render",)),),
)


@pytest.fixture
def secrets_pipeline(transactional_db, settings, demo_service, tmp_path):
    settings.DEMO_SERVICE_URL = demo_service.url
    settings.MEDIA_ROOT = tmp_path
    with registered(settings, "tests.tools.test_http_secrets.secret_pipeline"):
        yield


def _everything_recorded(run: Run) -> list[str]:
    """Every event, effect row, checkpoint and stored blob of the run, as text."""
    texts = [
        json.dumps([e.inputs, e.payload, e.payload_ref, e.artifacts])
        for e in Event.objects.filter(run=run)
    ]
    texts += [
        json.dumps([e.request, e.result], default=str) for e in Effect.objects.filter(run=run)
    ]
    texts += [json.dumps([c.outputs, c.artifacts]) for c in Checkpoint.objects.filter(run=run)]
    for artifact in Artifact.objects.all():
        with default_storage.open(artifact.blob, "rb") as blob:
            texts.append(blob.read().decode(errors="replace"))
    return texts


def test_credentials_in_query_headers_and_body_are_never_recorded(secrets_pipeline):
    run = engine.start_run("http-secrets", {}, actor="test", enqueue=False)
    run.refresh_from_db()

    # The demo renderer refuses fields it does not know, naming them: they were sent.
    assert engine.execute(run.pk, "render", run.ticket, holder="worker:test") == Outcome.FAILED

    recorded = _everything_recorded(run)
    assert [text for text in recorded if CANARY in text] == []
    result = Event.objects.get(run=run, type=Event.Type.TOOL_RESULT).payload
    assert "unknown field(s): account_pin, notes, signature" in result["error"]
    exchange = result["exchanges"][0]
    assert f"api_key={REDACTED}" in exchange["url"] and "size=large" in exchange["url"]
    assert exchange["request"]["headers"]["x-request-id"] == REDACTED
    assert exchange["request"]["body_ref"]  # the large body, stored redacted
    assert any(f'"signature":"{REDACTED}"' in text for text in recorded)

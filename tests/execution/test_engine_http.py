"""The engine with HTTP tools against the real demo service: what each call's event records
of the requests and responses, and a key the target holds for another request (409).

Stages run in-process (`engine.execute`, committed rows: the heartbeat thread has its own
connection); the target is the session's real gunicorn service.
"""

from __future__ import annotations

import httpx
import pytest
from django.conf import settings

from runs import engine
from runs.ledger import artifacts
from runs.models import Effect, Event, ReplayPolicy, Run
from runs.pipeline import KeyParts, Pipeline, Stage, StageOutput
from runs.planning.planner import Action, compute_plan
from runs.tools.http import Retry, http_tool
from tests.support.pipelines import registered
from tests.support.state import event_of


def _service_url() -> str:
    return settings.DEMO_SERVICE_URL


def _key(ctx, args: dict) -> KeyParts:
    return KeyParts("acct-http", "renderer", f"{ctx.root_id}/cover", "r1")


def _charge_key(ctx, args: dict) -> KeyParts:
    return KeyParts("acct-http", "card", f"{ctx.root_id}/fee", "r1")


def _work(ctx) -> StageOutput:
    image = ctx.call("render", "render", prompt=f"cover of {ctx.root_id}")
    fee = ctx.call("fee", "fee", amount="2.00")
    return StageOutput(outputs={"image": image["external_id"], "fee": fee["external_id"]})


http_pipeline = Pipeline(
    name="http-checks",
    tools=(
        http_tool(
            "render",
            ReplayPolicy.IDEMPOTENT,
            url="/v1/renders",
            base_url=_service_url,
            body=lambda args, key: {"prompt": args["prompt"]},
            key=_key,
            external_id="id",
            target="renderer",
            retry=Retry(attempts=2, backoff=0.01, max_backoff=0.05),
        ),
        http_tool(
            "fee",
            ReplayPolicy.NEVER,
            url="/v1/charges",
            base_url=_service_url,
            body=lambda args, key: {"account": "acct-http", "amount": args["amount"]},
            key=_charge_key,
            external_id="id",
            target="card processor",
        ),
    ),
    stages=(Stage("work", _work, tools=("render", "fee")),),
)


@pytest.fixture
def http_checks(transactional_db, settings, demo_service):
    settings.DEMO_SERVICE_URL = demo_service.url
    with registered(settings, "tests.execution.test_engine_http.http_pipeline"):
        yield demo_service


def start_and_execute() -> tuple[Run, str]:
    run = engine.start_run("http-checks", {}, actor="test", enqueue=False)
    run.refresh_from_db()
    outcome = engine.execute(run.pk, run.current_stage, run.ticket, holder="worker:test")
    run.refresh_from_db()
    return run, outcome


def test_a_confirmed_http_call_records_its_request_and_response_in_its_result_event(
    http_checks,
):
    run, outcome = start_and_execute()

    assert outcome == "verified"
    render = Effect.objects.get(run=run, call_id="render")
    [exchange] = event_of(run.pk, Event.Type.TOOL_RESULT, call="render").payload["exchanges"]
    assert exchange["request"]["headers"]["idempotency-key"] == render.delivery_key
    assert exchange["response"]["status"] == 201
    assert exchange["outcome"] == "confirmed"
    assert render.external_id in exchange["response"]["body"]


def test_an_answer_that_never_arrives_is_unknown_with_what_was_sent_in_the_failed_event(
    http_checks,
):
    http_checks.arm("charge", "drop")

    run, outcome = start_and_execute()

    assert (outcome, run.status) == ("stopped", Run.Status.FAILED)
    assert Effect.objects.get(run=run, call_id="fee").status == Effect.Status.UNKNOWN
    failed = event_of(run.pk, Event.Type.FAILED, call="fee")
    [exchange] = failed.payload["exchanges"]
    assert exchange["response"] is None
    assert "without a response" in exchange["error"]
    assert exchange["request"]["body"] == '{"account":"acct-http","amount":"2.00"}'
    assert len(http_checks.charges()) == 1  # the processor committed before it dropped


def test_large_bodies_of_a_call_are_artifacts_of_its_run(http_checks, settings):
    settings.RESUMER_HTTP_INLINE_BODY_BYTES = 64

    run, _ = start_and_execute()

    [exchange] = event_of(run.pk, Event.Type.TOOL_RESULT, call="render").payload["exchanges"]
    body = artifacts.read(exchange["response"]["body_ref"])
    assert body.startswith(b'{"id": "rnd-')
    assert artifacts.get(exchange["response"]["body_ref"]).run_id == run.pk


def test_a_key_the_target_holds_for_another_request_fails_the_run_and_blocks_its_resume(
    http_checks,
):
    # Someone else's request already sits under the key the run will send (e.g. a ledger
    # restored from an old backup): the renderer answers 409.
    run = engine.start_run("http-checks", {}, actor="test", enqueue=False)
    key = KeyParts("acct-http", "renderer", f"{run.public_id}/cover", "r1").key
    httpx.post(
        f"{http_checks.url}/v1/renders",
        json={"prompt": "someone else's cover"},
        headers={"Idempotency-Key": key},
        trust_env=False,
    ).raise_for_status()

    run.refresh_from_db()
    outcome = engine.execute(run.pk, run.current_stage, run.ticket, holder="worker:test")

    run.refresh_from_db()
    assert (outcome, run.status) == ("stopped", Run.Status.FAILED)
    render = Effect.objects.get(run=run, call_id="render")
    assert render.status == Effect.Status.CONFLICT
    failed = event_of(run.pk, Event.Type.FAILED, call="render")
    assert "key reused with a different request" in failed.payload["error"]
    assert [e["response"]["status"] for e in failed.payload["exchanges"]] == [409]
    assert http_checks.count("render", key, "conflict") == 1
    assert not Effect.objects.filter(run=run, call_id="fee").exists()

    plan = compute_plan(run)
    line = next(e for e in plan.effects if e.call_id == "render")
    assert (line.status, line.action) == (Effect.Status.CONFLICT, Action.BLOCKED)
    [blocker] = plan.blockers
    assert "409" in blocker and "supervisor" in blocker
    assert not plan.can_strict


def test_the_lookup_the_engine_makes_before_a_publish_is_recorded_with_the_publish(
    transactional_db, facts, redis_conn, demo_service
):
    from runs.models import ApprovalMode
    from runs.planning.resume import approve
    from tests.support.plans import run_in_process

    # The publish's answer was lost, and the article is gone from the platform since: the
    # plan calls again, and the engine asks the platform once more right before it does.
    run = run_in_process({"timeout": "publish/publish/after"})
    [article] = demo_service.articles()
    demo_service.delete_article(article["id"])
    approve(run, ApprovalMode.STRICT, compute_plan(run).fingerprint, actor="user:operator")

    run.refresh_from_db()
    engine.execute(run.pk, run.current_stage, run.ticket, holder="test:in-process")

    called = Event.objects.filter(
        run=run, type=Event.Type.TOOL_CALLED, payload__call="publish"
    ).latest("seq")
    [asked] = called.payload["reconcile"]
    assert (asked["method"], asked["outcome"]) == ("GET", "not-found")
    assert asked["response"]["status"] == 404
    assert "/v1/articles/by-key/" in asked["url"]
    assert len(demo_service.articles()) == 1

"""HTTP tools against the real demo service (gunicorn on a free port) with a real httpx
client: each row of the response mapping, Idempotency-Key replay and conflict, the retry
budget, network faults, reconcile lookups and the recorded exchanges."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from demo_service.process import ServiceProcess
from runs.ledger import artifacts
from runs.ledger.exchanges import ExchangeOutcome, exchanges_payload, recording
from runs.models import Artifact, Effect, ReplayPolicy
from runs.pipeline import KeyParts, Tool, ToolRejected, delivery_key, timed_out
from runs.tools.http import (
    HttpRejected,
    KeyConflict,
    Lookup,
    ReconcileUnavailable,
    Retry,
    TargetUnavailable,
    http_tool,
    spec_of,
)

FAST_RETRY = Retry(attempts=3, backoff=0.01, max_backoff=0.05)


def _key(name: str) -> str:
    return delivery_key("acct-42", "test", name, "r1")


def _no_key(ctx, args: dict) -> KeyParts:  # never called: the tests pass keys themselves
    raise AssertionError("the tests give the delivery key directly")


def render_tool(service: ServiceProcess, **options: Any) -> Tool:
    return http_tool(
        "render_image",
        ReplayPolicy.IDEMPOTENT,
        url="/v1/renders",
        base_url=service.url,
        body=lambda args, key: {"prompt": args["prompt"]},
        key=_no_key,
        external_id=options.pop("external_id", "id"),
        target="renderer",
        retry=options.pop("retry", FAST_RETRY),
        **options,
    )


def upload_tool(service: ServiceProcess) -> Tool:
    return http_tool(
        "upload_asset",
        ReplayPolicy.IDEMPOTENT,
        url="/v1/assets",
        base_url=service.url,
        key=_no_key,
        external_id="id",
        target="asset store",
        retry=FAST_RETRY,
    )


def _same_article(request: dict[str, Any], found: dict[str, Any]) -> bool:
    return found["title"] == request["title"]


def publish_tool(service: ServiceProcess, **options: Any) -> Tool:
    return http_tool(
        "publish_article",
        ReplayPolicy.RECONCILE_FIRST,
        url="/v1/articles",
        base_url=service.url,
        body=lambda args, key: {**args, "delivery_key": key},
        key=_no_key,
        external_id="id",
        reconcile=Lookup(
            "/v1/articles/by-key/{key}?account={account}&platform={platform}",
            matches=_same_article,
        ),
        target="platform",
        **options,
    )


def charge_tool(service: ServiceProcess, **options: Any) -> Tool:
    return http_tool(
        "charge_card",
        ReplayPolicy.NEVER,
        url="/v1/charges",
        base_url=service.url,
        key=_no_key,
        external_id="id",
        reconcile="/v1/charges/by-key/{key}",
        target="card processor",
        retry=FAST_RETRY,  # declared, and still never used by a NEVER tool
        **options,
    )


ARTICLE = {"account": "acct-42", "platform": "devblog", "title": "Resumable", "body": "text"}
CHARGE = {"account": "acct-42", "amount": "5.00"}


def _effect(key: str, request: dict[str, Any]) -> Effect:
    return Effect(delivery_key=key, request=request)


# --- the response mapping ------------------------------------------------------------------


def test_2xx_confirms_with_the_external_id_and_sends_the_delivery_key(demo_service):
    key = _key("cover")
    with recording() as seen:
        result = render_tool(demo_service).call({"prompt": "cover"}, key)

    assert result["external_id"].startswith("rnd-")
    assert result["svg"].startswith("<svg")
    assert demo_service.count("render", key) == 1
    assert [e.outcome for e in seen] == [ExchangeOutcome.CONFIRMED]
    assert seen[0].request_headers["idempotency-key"] == key
    assert seen[0].status == 201


def test_same_key_and_body_gets_the_stored_response_replayed(demo_service):
    key = _key("cover")
    tool = render_tool(demo_service)
    first = tool.call({"prompt": "cover"}, key)
    with recording() as seen:
        second = tool.call({"prompt": "cover"}, key)

    assert second == first
    assert seen[0].response_headers["idempotent-replayed"] == "true"
    assert demo_service.count("render", key) == 1
    assert demo_service.count("render", key, "replayed") == 1


def test_same_key_with_a_different_body_is_a_key_conflict(demo_service):
    key = _key("cover")
    tool = render_tool(demo_service)
    tool.call({"prompt": "cover"}, key)

    with pytest.raises(KeyConflict, match="key reused with a different request") as caught:
        tool.call({"prompt": "another cover"}, key)

    assert [e.outcome for e in caught.value.exchanges] == [ExchangeOutcome.CONFLICT]
    assert demo_service.count("render", key) == 1
    assert demo_service.count("render", key, "conflict") == 1


def test_other_4xx_is_rejected_and_nothing_happened(demo_service):
    with pytest.raises(HttpRejected, match="400 Bad Request: amount") as caught:
        charge_tool(demo_service).call({"account": "acct-42", "amount": "lots"}, _key("fee"))

    assert isinstance(caught.value, ToolRejected)
    assert caught.value.status == 400
    assert demo_service.charges() == []


def test_5xx_on_a_never_tool_is_outcome_unknown_and_not_retried(demo_service):
    key = _key("fee")
    demo_service.arm("charge", "error", key=key, status=503, times=2)

    with pytest.raises(TargetUnavailable, match="card processor answered 503") as caught:
        charge_tool(demo_service).call(CHARGE, key)

    assert caught.value.status == 503
    assert len(caught.value.exchanges) == 1
    assert demo_service.count("charge", key, "refused") == 1
    assert demo_service.charges() == []


def test_idempotent_tool_retries_a_5xx_with_the_same_key_and_commits_once(demo_service):
    key = _key("cover")
    demo_service.arm("render", "error", key=key, status=503, times=2)

    with recording() as seen:
        result = render_tool(demo_service).call({"prompt": "cover"}, key)

    assert result["external_id"].startswith("rnd-")
    assert [e.outcome for e in seen] == [
        ExchangeOutcome.RETRIED,
        ExchangeOutcome.RETRIED,
        ExchangeOutcome.CONFIRMED,
    ]
    assert {e.request_headers["idempotency-key"] for e in seen} == {key}
    assert demo_service.count("render", key) == 1
    assert demo_service.count("render", key, "refused") == 2


def test_retry_budget_spent_is_outcome_unknown(demo_service):
    key = _key("cover")
    demo_service.arm("render", "error", key=key, status=502, times=5)

    with pytest.raises(TargetUnavailable, match="after 3 attempts") as caught:
        render_tool(demo_service).call({"prompt": "cover"}, key)

    assert len(caught.value.exchanges) == 3
    assert demo_service.count("render", key) == 0
    assert demo_service.count("render", key, "refused") == 3


def test_2xx_without_the_external_id_is_outcome_unknown(demo_service):
    with pytest.raises(TargetUnavailable, match="no external id at 'data.id'"):
        render_tool(demo_service, external_id="data.id").call({"prompt": "cover"}, _key("c"))


# --- network faults -------------------------------------------------------------------------


def test_commit_then_drop_is_outcome_unknown_and_reconcile_finds_it(demo_service):
    key = _key("draft")
    demo_service.arm("publish", "drop", key=key)
    tool = publish_tool(demo_service)

    with pytest.raises(TargetUnavailable, match="without a response") as caught:
        tool.call(ARTICLE, key)

    assert caught.value.sent and caught.value.status is None
    [article] = demo_service.articles()
    answer = tool.reconcile(_effect(key, ARTICLE))
    assert answer.found and answer.matches
    assert answer.external_id == article["id"]
    assert answer.result["url"] == article["url"]


def test_idempotent_tool_retries_a_dropped_connection_and_gets_the_replay(demo_service):
    key = _key("cover")
    demo_service.arm("render", "drop", key=key)

    with recording() as seen:
        result = render_tool(demo_service).call({"prompt": "cover"}, key)

    assert [e.outcome for e in seen] == [ExchangeOutcome.RETRIED, ExchangeOutcome.CONFIRMED]
    assert seen[1].response_headers["idempotent-replayed"] == "true"
    assert result["external_id"].startswith("rnd-")
    assert demo_service.count("render", key) == 1


def test_answer_after_the_time_out_is_outcome_unknown(demo_service):
    key = _key("draft")
    demo_service.arm("publish", "delay", key=key, seconds=2)

    with pytest.raises(TargetUnavailable, match="platform did not answer within 0.5 s"):
        publish_tool(demo_service, read_timeout=0.5).call(ARTICLE, key)

    assert len(demo_service.articles(delivery_key=key)) == 1  # committed before the delay


def test_an_answer_after_the_time_out_says_it_timed_out(demo_service):
    key = _key("draft")
    demo_service.arm("publish", "delay", key=key, seconds=2)

    with pytest.raises(TargetUnavailable) as caught:
        publish_tool(demo_service, read_timeout=0.5).call(ARTICLE, key)

    assert caught.value.timed_out and timed_out(caught.value)


def test_a_dropped_connection_did_not_time_out(demo_service):
    key = _key("fee")
    demo_service.arm("charge", "drop", key=key)

    with pytest.raises(TargetUnavailable) as caught:
        charge_tool(demo_service).call(CHARGE, key)

    assert not caught.value.timed_out and not timed_out(caught.value)


def test_target_down_is_outcome_unknown_and_known_unsent(demo_service):
    demo_service.stop()

    with pytest.raises(TargetUnavailable, match="card processor could not be reached") as caught:
        charge_tool(demo_service).call(CHARGE, _key("fee"))

    assert caught.value.sent is False
    # A refused connection is not worded as a time-out: nothing waited.
    assert "refused" in str(caught.value) and "within" not in str(caught.value)
    assert not caught.value.timed_out


# --- reconcile ------------------------------------------------------------------------------


def test_reconcile_of_nothing_under_the_key_is_not_found(demo_service):
    answer = publish_tool(demo_service).reconcile(_effect(_key("draft"), ARTICLE))

    assert not answer.found
    assert demo_service.count("publish.lookup", _key("draft"), "missing") == 1


def test_reconcile_of_a_different_object_under_the_key_does_not_match(demo_service):
    key = _key("draft")
    tool = publish_tool(demo_service)
    tool.call(ARTICLE, key)

    answer = tool.reconcile(_effect(key, {**ARTICLE, "title": "Another title"}))

    assert answer.found and not answer.matches
    assert "differs" in answer.detail


def test_reconcile_while_the_target_is_down_says_it_could_not_be_reached(demo_service):
    demo_service.stop()

    with pytest.raises(ReconcileUnavailable, match="platform could not be reached"):
        publish_tool(demo_service).reconcile(_effect(_key("draft"), ARTICLE))


def test_reconcile_answer_after_the_time_out_is_unavailable(demo_service):
    key = _key("draft")
    demo_service.arm("publish.lookup", "delay", key=key, seconds=2)

    with pytest.raises(ReconcileUnavailable, match="platform did not answer within 0.5 s"):
        publish_tool(demo_service, read_timeout=0.5).reconcile(_effect(key, ARTICLE))


def test_reconcile_5xx_is_unavailable(demo_service):
    key = _key("fee")
    demo_service.arm("charge.lookup", "error", key=key, status=500)

    with pytest.raises(ReconcileUnavailable, match="could not answer: 500"):
        charge_tool(demo_service).reconcile(_effect(key, CHARGE))


# --- records --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_exchanges_keep_small_bodies_inline_and_store_large_ones_as_artifacts(
    demo_service, settings
):
    settings.RESUMER_HTTP_INLINE_BODY_BYTES = 1024
    svg = "<svg>" + "x" * 4000 + "</svg>"
    with recording() as seen:
        upload_tool(demo_service).call({"name": "cover", "content": svg}, _key("upload"))

    [record] = exchanges_payload(seen, name="http/test/upload-cover")

    request, response = record["request"], record["response"]
    assert artifacts.read(request["body_ref"]) == seen[0].request_body
    assert request["body_bytes"] == len(seen[0].request_body)
    assert response["status"] == 201
    assert response["body"] == seen[0].response_body.decode()
    assert response["headers"]["idempotent-replayed"] == "false"
    assert Artifact.objects.filter(name="http/test/upload-cover/1/request").count() == 1


def test_exchanges_never_record_credentials(demo_service):
    tool = render_tool(demo_service, headers={"Authorization": "Bearer secret"})
    with recording() as seen:
        tool.call({"prompt": "cover"}, _key("cover"))

    assert "authorization" not in seen[0].request_headers


# --- declaring ------------------------------------------------------------------------------


def test_a_tool_with_effects_must_say_where_its_external_id_is():
    with pytest.raises(ValueError, match="external id"):
        http_tool("publish", ReplayPolicy.IDEMPOTENT, url="http://x/", key=_no_key)


def test_an_http_tool_is_a_plain_tool_with_its_declaration_reachable(demo_service):
    tool = charge_tool(demo_service, cost=Decimal("5.00"), verb="charge")

    assert isinstance(tool, Tool) and tool.verb == "charge"
    assert spec_of(tool).read_timeout == 5.0
    assert tool.reconcile is not None

"""The model tool (runs/tools/model.py) over real HTTP against the demo service's
OpenAI-compatible /v1/chat/completions, in the demo pipeline: a confirmed completion reused
and never billed again, an unknown one retried under its key with the plan's caveat, tokens
and money from plan to PLAN_KEPT, the model pinned, the conversation as context only, and no
credential anywhere in the ledger."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from demo import faults
from demo.management.commands.seed_demo import run_inline
from demo.pipeline import content_pipeline
from demo_service.process import ServiceClient
from runs.execution.agent_loop import conversations_of
from runs.ledger import artifacts
from runs.ledger.checkpoints import latest_checkpoint
from runs.models import Artifact, Effect, Event, Run
from runs.planning.planner import compute_plan
from runs.planning.resume import approve
from runs.reads.decision import decision
from runs.tools.model import (
    BILLED_TWICE,
    ModelTool,
    ModelUnavailable,
    Price,
    request_of,
    spec_of,
)
from tests.support.plans import blob_file
from tests.support.processes import free_port

SECRET = "sk-test-never-record-me-4242"


@pytest.fixture
def service(facts, settings) -> ServiceClient:
    # The stages run here, inline, with no heartbeat thread renewing their lease: the lease
    # must outlive a whole stage of model calls on a loaded machine, not the suite's 4 s.
    settings.RESUMER_LEASE_TTL = 30
    return ServiceClient(settings.DEMO_SERVICE_URL)


def started(options=None, **inputs) -> Run:
    run = faults.start_run("content", inputs, actor="test", faults=options or {}, enqueue=False)
    return run_inline(run.pk)


def lines(plan) -> dict:
    return {f"{line.stage}/{line.call_id}": line for line in plan.effects}


def chats(service: ServiceClient, mark: int, key: str | None = None) -> int:
    return sum(
        row["count"]
        for row in service.meter(op="chat", after=mark)
        if row["outcome"] == "billed" and (key is None or row["key"] == key)
    )


def resumed(run: Run, mode: str = "strict") -> Run:
    approve(run, mode, compute_plan(run).fingerprint, actor="test")
    if mode == "upgrade":
        run = Run.objects.filter(parent=run).get()
    return run_inline(run.pk)


# --- the tool alone ---------------------------------------------------------------------------


def test_the_key_is_the_model_the_messages_and_the_parameters():
    tool = content_pipeline.tool("model")
    base = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}

    def revision(**changes):
        return request_of({**base, **changes})

    assert revision() == request_of(dict(base))
    assert revision(model="m2") != revision()
    assert revision(temperature=1) != revision()
    assert revision(messages=[{"role": "user", "content": "hi!"}]) != revision()
    # Not a request parameter: it does not change the key.
    assert revision(unrelated=1) == revision()
    assert tool.policy == "IDEMPOTENT" and tool.caveat == BILLED_TWICE


def test_money_comes_from_the_price_table_cached_tokens_at_their_own_price():
    price = Price("2.50", "10.00", cached="1.25")
    cost = price.cost({"prompt": 1_000_000, "completion": 100_000, "cached": 400_000})
    assert cost == Decimal("1.5") + Decimal("0.5") + Decimal("1.0")
    spec = spec_of(content_pipeline.tool("model"))
    money, tokens = spec.metered(
        {"model": "demo-writer-9", "usage": {"prompt": 100, "completion": 50, "cached": 0}}
    )
    # Quantized to four places, like every cost the effect ledger keeps.
    assert money == Decimal("0.0008") and tokens["completion"] == 50


MILLION_EACH = {"prompt": 1_000_000, "completion": 1_000_000, "cached": 0}


def priced(model: str, **declared) -> Decimal:
    return ModelTool("model", "http://127.0.0.1:1/v1", **declared).metered(
        {"model": model, "usage": MILLION_EACH}
    )[0]


def test_a_model_no_table_of_ours_prices_is_priced_by_the_maintained_table(settings):
    settings.RESUMER_MODEL_PRICES = {}
    # genai-prices 0.2.5: gpt-4o-mini at $0.15 per million prompt tokens, $0.60 completion.
    assert priced("gpt-4o-mini") == Decimal("0.75")
    # A model it does not know costs nothing (its tokens are still counted).
    assert priced("demo-writer-1") == Decimal(0)


def test_the_settings_table_and_a_tools_own_prices_win_over_the_maintained_one(settings):
    settings.RESUMER_MODEL_PRICES = {"gpt-4o-mini": {"prompt": "1", "completion": "2"}}
    assert priced("gpt-4o-mini") == Decimal("3")
    assert priced("gpt-4o-mini", prices={"gpt-4o": Price("5", "5")}) == Decimal("10")


# --- in the demo pipeline ---------------------------------------------------------------------


def test_a_confirmed_completion_is_reused_on_resume_with_no_new_billed_completion(service):
    # A run without a fault first: the plan estimates a model call's tokens from its last answer.
    assert started().status == Run.Status.SUCCEEDED
    # The loop's first turn is confirmed; the search it asked for never answers.
    run = started({"timeout": "research/search-1/after"})
    assert run.status == Run.Status.FAILED
    turn_1 = Effect.objects.get(run=run, call_id="turn-1")
    assert turn_1.status == Effect.Status.CONFIRMED
    plan = compute_plan(run)
    by_call = lines(plan)
    assert by_call["research/turn-1"].action == "reuse"
    assert by_call["research/search-1"].action == "re-run"
    assert by_call["research/turn-2"].action == "call"
    assert plan.cost_resume.calls["model"] == 2  # turn 2 and the draft
    mark = service.marks()["meter"]

    run = resumed(run)

    assert run.status == Run.Status.SUCCEEDED
    assert chats(service, mark, turn_1.delivery_key) == 0
    assert chats(service, mark) == 2
    kept = Event.objects.get(run=run, type=Event.Type.PLAN_KEPT).payload
    assert kept["used"]["tokens"] == plan.cost_resume.tokens
    assert kept["used"]["money"] == plan.cost_resume.money
    assert kept["used"]["calls"] == plan.cost_resume.calls
    assert sum(kept["used"]["tokens"].values()) > 0


@pytest.mark.parametrize("fault", ["late", "drop"])
def test_a_lost_answer_is_retried_under_the_same_key_and_may_be_billed_twice(
    service, settings, fault
):
    # "late": the answer comes after the tool's 5 s time-out (a lease outlives it here, with no
    # heartbeat in this process); "drop": the connection closes without one. Billed either way.
    run = started({"network": {"draft/generate": fault}})
    assert run.status == Run.Status.FAILED
    effect = Effect.objects.get(run=run, call_id="generate")
    assert effect.status == Effect.Status.UNKNOWN
    plan = compute_plan(run)
    line = lines(plan)["draft/generate"]
    assert line.action == "retry-same-key"
    assert BILLED_TWICE in line.answer and line.may_bill_twice
    # The decision box says what the line says, in words and money; never "nothing twice".
    strict = decision(run, plan, None).strict
    assert "1 may be billed twice" in strict.note and plan.cost_resume.billed_twice == 1
    assert "makes nothing twice" not in strict.note

    run = resumed(run)

    assert run.status == Run.Status.SUCCEEDED
    assert Effect.objects.get(pk=effect.pk).status == Effect.Status.CONFIRMED
    # The service answered the first request too late, after billing it: two bills, one key.
    assert chats(service, 0, effect.delivery_key) == 2


def test_a_completion_answered_after_the_time_out_fails_the_run_as_timed_out(service, settings):
    settings.RESUMER_LEASE_TTL = 30  # as above: no heartbeat in this process
    run = started({"network": {"draft/generate": "late"}})

    failed = Event.objects.get(run=run, type=Event.Type.FAILED)
    assert (failed.payload["call"], failed.payload["timed_out"]) == ("generate", True)


def test_a_provider_that_refuses_the_connection_is_said_to_be_unreachable_not_slow(db):
    tool = ModelTool("model", f"http://127.0.0.1:{free_port()}/v1", attempts=1)

    with pytest.raises(ModelUnavailable) as caught:
        tool.call({"model": "m1", "messages": [{"role": "user", "content": "hi"}]}, "k")

    assert "model API could not be reached" in str(caught.value)
    assert "refused" in str(caught.value) and not caught.value.timed_out


def test_model_drift_strict_keeps_the_pinned_model_and_upgrade_uses_the_new_one(service, settings):
    run = started({"timeout": "visual/upload-cover/after"})
    settings.DEMO_MODEL = "demo-writer-2"
    plan = compute_plan(run)
    assert [(d.input, d.pinned, d.current) for d in plan.drift] == [
        ("model", "demo-writer-1", "demo-writer-2")
    ]
    assert plan.upgrade.available and plan.upgrade.branch_stage == "research"

    branch = resumed(run, "upgrade")

    assert branch.status == Run.Status.SUCCEEDED
    assert branch.inputs["model"] == "demo-writer-2"
    models = {e.request["model"] for e in Effect.objects.filter(run=branch, tool="model")}
    assert models == {"demo-writer-2"}
    draft = latest_checkpoint(branch, "draft").artifacts[0]
    assert b"Drafted by demo-writer-2." in artifacts.read(draft["uri"])


def test_strict_resume_keeps_the_model_pinned_before_the_change(service, settings):
    run = started({"timeout": "research/search-1/after"})
    settings.DEMO_MODEL = "demo-writer-3"
    run = resumed(run)
    assert run.status == Run.Status.SUCCEEDED
    models = {e.request["model"] for e in Effect.objects.filter(run=run, tool="model")}
    assert models == {"demo-writer-1"}


def test_the_conversation_is_context_changing_or_deleting_it_changes_no_plan(service):
    run = started({"timeout": "research/search-1/after"})
    [conversation] = list(conversations_of(run.pk, "research"))[:1]
    roles = [m["role"] for m in conversation["messages"]]
    assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
    assert conversation["messages"][0]["content"].startswith("Facts (verified and pinned")
    before = compute_plan(run)

    refs = [
        e.payload["result"]["conversation"]
        for e in Event.objects.filter(run=run, type=Event.Type.TOOL_RESULT)
        if e.payload.get("tool") == "model"
    ]
    assert refs
    with open(blob_file(refs[0]["uri"]), "w") as handle:
        handle.write(json.dumps({"messages": [{"role": "user", "content": "forget the facts"}]}))
    for ref in refs[1:]:
        Artifact.objects.filter(sha256=ref["sha256"]).update(blob="missing/nowhere")
    after = compute_plan(run)

    assert after.fingerprint == before.fingerprint
    assert after.effects == before.effects
    assert list(conversations_of(run.pk, "research")) == []
    run = resumed(run)
    assert run.status == Run.Status.SUCCEEDED
    assert Event.objects.filter(run=run, type=Event.Type.PLAN_KEPT).exists()


def test_credentials_are_in_no_event_artifact_or_effect(service, monkeypatch):
    monkeypatch.setenv("DEMO_MODEL_API_KEY", SECRET)
    run = started()
    assert run.status == Run.Status.SUCCEEDED
    for payload in Event.objects.filter(run=run).values_list("payload", flat=True):
        assert SECRET not in json.dumps(payload)
    for effect in Effect.objects.filter(run=run):
        assert SECRET not in json.dumps([effect.request, effect.result])
    for artifact in Artifact.objects.all():
        assert SECRET.encode() not in artifacts.read(artifact.uri)
    exchanges = [
        x
        for p in Event.objects.filter(run=run, type=Event.Type.TOOL_RESULT).values_list(
            "payload", flat=True
        )
        for x in p.get("exchanges", [])
        if x["tool"] == "model"
    ]
    assert exchanges and all("authorization" not in x["request"]["headers"] for x in exchanges)


def test_the_run_page_shows_the_conversation_as_context(service):
    from tests.support.web import client_as

    run = started({"timeout": "research/search-1/after"})
    html = client_as("viewer").get(f"/runs/{run.public_id}/").content.decode()
    assert "Conversation — context, not evidence" in html
    assert "asks for search(" in html
    assert "Facts (verified and pinned" in html

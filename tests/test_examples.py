"""The example agent of docs/pipelines.md (examples/announcer.py): a module outside runs/ and
demo/, registered only through RESUMER_PIPELINES and PYTHONPATH, with one HTTP tool per replay
policy, run by a real worker against the real demo service."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core import checks

from runs import engine
from runs.models import ApprovalMode, Checkpoint, Effect, Event, Run
from runs.pipeline import registry
from runs.planning.planner import Action, compute_plan
from runs.planning.resume import approve
from tests.support.state import event_of, new_account, wait_settled

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PIPELINE = "announcer.pipeline"


@pytest.fixture
def announcer(workers, demo_service, settings, monkeypatch) -> Iterator[dict[str, str]]:
    """The example registered here and, through the environment only, in the workers."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("ANNOUNCER_API_URL", demo_service.url)
    settings.RESUMER_PIPELINES = [PIPELINE]
    registry._pipelines = None
    yield {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")])),
        "RESUMER_PIPELINES": PIPELINE,
        # Not the demo's fault hooks: the example knows nothing of the demo.
        "RESUMER_CALL_HOOKS": "",
        "ANNOUNCER_API_URL": demo_service.url,
    }
    registry._pipelines = None
    sys.modules.pop("announcer", None)


def start(workers, env: dict[str, str]) -> Run:
    run = engine.start_run(
        "announcer", {"account": new_account("announcer"), "version": "2.4.0"}, actor="test"
    )
    workers.start("announcer", burst=True, env=env).wait(timeout=120)
    return run


def test_the_example_passes_the_system_check(announcer):
    assert sorted(m.id for m in checks.run_checks(tags=["resumer"])) == []


def test_the_example_agent_runs_on_a_real_worker_with_one_http_tool_per_policy(
    announcer, workers, demo_service
):
    run = start(workers, announcer)

    assert wait_settled(run.pk) == Run.Status.SUCCEEDED
    effects = {e.call_id: e for e in Effect.objects.filter(run=run)}
    assert {c: (e.policy, e.status) for c, e in effects.items()} == {
        "banner": ("IDEMPOTENT", Effect.Status.CONFIRMED),
        "publish": ("RECONCILE_FIRST", Effect.Status.CONFIRMED),
        "boost": ("NEVER", Effect.Status.CONFIRMED),
    }
    account = run.inputs["account"]
    [article] = demo_service.articles(account=account)
    [boost] = demo_service.charges(account=account)
    assert Checkpoint.objects.get(run=run, stage="announce").outputs == {
        "article_id": article["id"],
        "boost_id": boost["id"],
    }
    # The SAFE read went over HTTP too, and its request and answer are in its event.
    [listed] = event_of(run.pk, Event.Type.TOOL_RESULT, call="earlier").payload["exchanges"]
    assert (listed["method"], listed["response"]["status"]) == ("GET", 200)


def test_the_example_agent_resumes_a_publish_whose_answer_was_lost_without_publishing_twice(
    announcer, workers, demo_service
):
    demo_service.arm("publish", "drop")  # the platform publishes, then drops the connection
    run = start(workers, announcer)
    assert wait_settled(run.pk) == Run.Status.FAILED
    assert Effect.objects.get(run=run, call_id="publish").status == Effect.Status.UNKNOWN

    plan = compute_plan(run)
    assert {e.call_id: e.action for e in plan.effects if e.stage == "announce"} == {
        "publish": Action.RECORD_FOUND,
        "boost": Action.CALL,
    }
    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    workers.start("resume", burst=True, env=announcer).wait(timeout=120)

    assert wait_settled(run.pk) == Run.Status.SUCCEEDED
    account = run.inputs["account"]
    [article] = demo_service.articles(account=account)
    assert Effect.objects.get(run=run, call_id="publish").external_id == article["id"]
    assert len(demo_service.charges(account=account)) == 1
    assert demo_service.count("publish") == 1

"""/metrics: who may read it, that a scrape costs the same few queries however many runs
there are, and that after the protocol's story (a worker SIGKILLed at the cover upload, a
strict resume on a real worker) the counters moved by exactly what happened."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from demo import faults
from demo.management.commands.seed_demo import run_inline
from runs.events import read
from runs.models import ApprovalMode, Event, Run
from runs.planning.planner import compute_plan
from runs.planning.resume import approve
from tests.observability.scrape import by, moved, scrape, total
from tests.support.plans import resumed_inline, wait_succeeded

TOKEN = "metrics-test-token-0123456789"


@pytest.fixture
def in_process(transactional_db, facts, redis_conn) -> None:
    """Committed rows for in-process runs, the demo facts, an empty queue."""


# --- the guard ------------------------------------------------------------------------------


def get(remote: str = "127.0.0.1", **meta: str) -> int:
    return Client().get("/metrics", REMOTE_ADDR=remote, **meta).status_code


@pytest.mark.parametrize("remote", ["127.0.0.1", "::1", "10.2.3.4", "172.20.0.9", "192.168.1.5"])
def test_without_a_token_local_and_private_clients_read_it(db, settings, remote):
    settings.RESUMER_METRICS_TOKEN = ""
    assert get(remote) == 200


@pytest.mark.parametrize("remote", ["203.0.113.5", "8.8.8.8", "2001:db8::1", "100.64.0.1", ""])
def test_without_a_token_anyone_else_is_refused(db, settings, remote):
    settings.RESUMER_METRICS_TOKEN = ""
    assert get(remote) == 403


def test_a_request_through_a_proxy_resumer_was_not_told_about_is_refused(db, settings):
    """Behind an undeclared proxy every client would look like the proxy's local address."""
    settings.RESUMER_METRICS_TOKEN, settings.RESUMER_TRUSTED_PROXIES = "", 0
    assert get("127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.5") == 403

    settings.RESUMER_TRUSTED_PROXIES = 1  # declared: the client it saw is what counts
    assert get("127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.5") == 403
    assert get("127.0.0.1", HTTP_X_FORWARDED_FOR="10.0.0.8") == 200
    # What the client wrote itself stands further left and is not read.
    assert get("127.0.0.1", HTTP_X_FORWARDED_FOR="10.0.0.8, 203.0.113.5") == 403


def test_with_a_token_only_its_bearer_reads_it_from_anywhere(db, settings):
    settings.RESUMER_METRICS_TOKEN = TOKEN
    response = Client().get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    for wrong in ("", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", TOKEN):
        assert get("127.0.0.1", HTTP_AUTHORIZATION=wrong) == 401
    assert get("203.0.113.5", HTTP_AUTHORIZATION=f"Bearer {TOKEN}") == 200
    assert get("203.0.113.5", HTTP_AUTHORIZATION=f"bearer {TOKEN}") == 200


def test_only_get_and_never_cached(db):
    assert Client().post("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 405
    response = Client().get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert "no-cache" in response["Cache-Control"]


def test_a_head_request_is_answered_as_a_get_is(db):
    response = Client().head("/metrics", REMOTE_ADDR="127.0.0.1")

    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    assert Client().head("/metrics", REMOTE_ADDR="8.8.8.8").status_code == 403


# --- cost -----------------------------------------------------------------------------------


def test_model_tokens_and_money_are_series_by_pipeline_and_model(in_process, settings):
    run = faults.start_run("content", {}, actor="test", enqueue=False)
    run = run_inline(run.pk)
    rows = Event.objects.filter(run=run, type=Event.Type.TOOL_RESULT)
    calls = [said for said in map(read, rows) if said.usage]
    assert calls and run.status == Run.Status.SUCCEEDED

    samples = scrape()

    labels = {"pipeline": "content", "model": settings.DEMO_MODEL}
    assert total(samples, "resumer_model_calls_total", **labels) == len(calls)
    for kind in ("prompt", "completion", "cached"):
        used = sum(said.usage[kind] for said in calls)
        assert total(samples, "resumer_model_tokens_total", kind=kind, **labels) == used
    spent = sum(Decimal(said.cost) for said in calls)
    assert total(samples, "resumer_model_spend_dollars_total", **labels) == pytest.approx(
        float(spent)
    )


def test_a_scrape_costs_the_same_queries_with_one_run_or_three(in_process):
    resumed_inline({"timeout": "visual/render-cover/after"})
    with CaptureQueriesContext(connection) as one:
        first = scrape()
    resumed_inline({"timeout": "visual/render-cover/after"})
    resumed_inline({"timeout": "visual/render-cover/after"})
    with CaptureQueriesContext(connection) as three:
        third = scrape()

    assert len(one) == len(three) == 7
    # And the counters are counts: three identical stories, three times the figures.
    for name in (
        "resumer_tool_calls_total",
        "resumer_resumes_total",
        "resumer_plan_verdicts_total",
    ):
        assert moved({}, third, name) == {k: 3 * v for k, v in moved({}, first, name).items()}
    assert total(third, "resumer_stage_duration_seconds_count", stage="visual") == 3
    assert total(third, "resumer_runs", status="succeeded") == 3


# --- the story ------------------------------------------------------------------------------


def test_the_story_moves_every_counter_by_exactly_what_happened(story_run, demo_service):
    run = story_run
    before = (timezone.now() - run.updated_at).total_seconds()
    stopped = scrape()
    after = (timezone.now() - run.updated_at).total_seconds()
    # The crash: one interruption, in visual, noticed by the sweeper after the lease ran out.
    assert by(stopped, "resumer_interruptions_total", "stage") == {"visual": 1}
    assert total(stopped, "resumer_interruption_detection_seconds_count") == 1
    assert 0 < total(stopped, "resumer_interruption_detection_seconds_sum") < 60
    assert total(stopped, "resumer_runs", status="interrupted") == 1
    assert total(stopped, "resumer_runs_needing_human", status="interrupted") == 1
    # The run has needed a human since its last change, as the scrape saw it.
    oldest = total(stopped, "resumer_runs_needing_human_oldest_seconds", status="interrupted")
    assert before - 0.5 <= oldest <= after + 0.5
    assert total(stopped, "resumer_resumes_total") == 0

    plan = compute_plan(run)
    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    wait_succeeded(run)
    done = scrape()

    assert moved(stopped, done, "resumer_interruptions_total") == {}
    assert moved(stopped, done, "resumer_resumes_total") == {
        (("mode", "strict"), ("pipeline", "content")): 1
    }
    assert moved(stopped, done, "resumer_plan_verdicts_total") == {
        (("pipeline", "content"), ("verdict", "kept")): 1
    }
    # The resumed stages' calls: made as the plan priced them, the rest reused from the ledger.
    made = Counter(plan.cost_resume.calls)
    reused = Counter(line.tool for line in plan.effects if line.action == "reuse")
    assert made == {"upload_asset": 1, "publish_article": 1, "charge_card": 1}
    assert reused == {"render_image": 3, "upload_asset": 2}
    calls = moved(stopped, done, "resumer_tool_calls_total")
    outcomes = Counter()
    for labels, delta in calls.items():
        found = dict(labels)
        outcomes[found["tool"], found["outcome"]] += delta
    assert outcomes == {
        **{(tool, "confirmed"): n for tool, n in made.items()},
        **{(tool, "reused"): n for tool, n in reused.items()},
    }
    policies = {dict(labels)["tool"]: dict(labels)["policy"] for labels in calls}
    assert policies["charge_card"] == "NEVER"
    assert policies["publish_article"] == "RECONCILE_FIRST"
    # One more verified attempt of each resumed stage; the runs' gauges followed the run.
    durations = moved(stopped, done, "resumer_stage_duration_seconds_count")
    assert {dict(labels)["stage"]: n for labels, n in durations.items()} == {
        stage: 1 for stage in plan.stages_reexecuted
    }
    assert total(done, "resumer_runs", status="succeeded") == 1
    assert total(done, "resumer_runs", status="interrupted") == 0
    assert total(done, "resumer_runs_needing_human") == 0
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED


def test_every_metric_family_served_is_in_docs_monitoring(db):
    page = (Path(__file__).resolve().parents[2] / "docs" / "monitoring.md").read_text()
    response = Client().get("/metrics", REMOTE_ADDR="127.0.0.1")
    families = {f.name for f in text_string_to_metric_families(response.content.decode())}

    assert families, "nothing served"
    undocumented = sorted(
        name for name in families if f"`{name}`" not in page and f"`{name}_total`" not in page
    )
    assert undocumented == []

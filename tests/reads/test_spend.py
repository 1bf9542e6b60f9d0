"""A run's model spend (runs/reads/spend.py) on its page: each answered model call's tokens and
money, per stage and for the run, as its TOOL_RESULT events recorded them; a call reused on a
resume was not billed again and is not counted again."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from demo import faults
from demo.management.commands.seed_demo import run_inline
from runs.events import read
from runs.models import Event, Run
from runs.planning import stored_plans
from runs.planning.planner import compute_plan
from runs.planning.resume import approve
from runs.quantities import money
from runs.reads.spend import run_spend
from tests.support.web import client_as

pytestmark = pytest.mark.django_db(transaction=True)


def started(options: dict | None = None) -> Run:
    run = faults.start_run("content", {}, actor="test", faults=options or {}, enqueue=False)
    return run_inline(run.pk)


def billed(run: Run) -> list:
    """The run's model calls that were answered, read from its events."""
    rows = Event.objects.filter(run=run, type=Event.Type.TOOL_RESULT).order_by("seq")
    return [said for said in map(read, rows) if said.usage]


def test_the_run_page_shows_its_model_calls_tokens_and_money(facts):
    run = started()
    calls = billed(run)
    assert {said.call for said in calls} >= {"turn-1", "generate"}
    prompt = sum(said.usage["prompt"] for said in calls)
    completion = sum(said.usage["completion"] for said in calls)
    spent = sum((Decimal(said.cost) for said in calls), Decimal(0))

    html = client_as("viewer").get(reverse("runs:run", args=[run.pk])).content.decode()

    assert f"used <strong>{prompt + completion} tokens</strong>" in html
    assert f"costing <strong>{money(spent)}</strong> in {len(calls)} calls" in html
    assert "Stage research (" in html and "Stage draft (1 call)" in html
    assert spent > 0 and all(said.model == "demo-writer-1" for said in calls)


def test_a_call_reused_on_a_resume_is_counted_once(facts, redis_conn):
    run = started({"timeout": "research/search-1/after"})
    approve(run, "strict", compute_plan(run).fingerprint, actor="test")
    run = run_inline(run.pk)
    assert run.status == Run.Status.SUCCEEDED

    spend = run_spend(run)

    assert [line.call for line in spend.lines].count("turn-1") == 1
    assert spend.run.calls == len(billed(run)) == len(spend.lines)
    assert sum(s.calls for s in spend.stages.values()) == spend.run.calls


def test_the_web_plan_shows_the_model_tokens_each_option_would_use(facts, redis_conn):
    started()  # an answered run: a plan estimates a model call's tokens from its last answer
    run = started({"timeout": "research/search-1/after"})
    stored_plans.refresh(run)
    plan = stored_plans.shown(run)[0]
    tokens = plan.cost_resume.tokens
    assert tokens["prompt"] > 0 and tokens["completion"] > 0

    html = client_as("viewer").get(reverse("runs:plan", args=[run.pk])).content.decode()

    said = f"{tokens['prompt']} prompt, {tokens['completion']} completion"
    assert said in html and "Model tokens (estimated)" in html

"""The inbox says true things (issue 48, point 2): a run waiting at a gate is not a run
"without a current plan"; a blocked run says what it waits for instead of a price that reads
as free; a run whose approved resume stopped again says so and comes before fresh failures."""

from __future__ import annotations

import importlib
import re

import pytest
from django.apps import apps

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.execution import sweeper
from runs.models import Run, StoredPlan
from runs.planning import grouping, stored_plans
from runs.planning.planner import compute_plan
from runs.planning.resume import approve
from runs.reads import inbox
from tests.support.plans import charge_unknown, interrupted_with_plan, stopped_in_process
from tests.support.web import api_as, client_as

pytestmark = pytest.mark.django_db


def row_of(html: str, run: Run) -> str:
    start = html.index(f">{run.public_id}</a></th>")
    return html[start : html.index("</tr>", start)]


def resumed_then_interrupted() -> Run:
    """Approved for a strict resume, then its worker vanished again: its resume failed."""
    run = interrupted_with_plan()
    approve(run, "strict", compute_plan(run).fingerprint, actor="test")
    sweeper.interrupt(sweeper.Finding(run.pk, "test: the worker vanished again", {}), takeover=True)
    run.refresh_from_db()
    stored_plans.refresh(run)
    return Run.objects.get(pk=run.pk)


def test_runs_waiting_at_gates_are_not_counted_among_runs_without_a_plan(facts):
    run_inline(engine.start_run("content", {"review": "on"}, actor="test", enqueue=False).pk)
    assert grouping.groups().unplanned == 0
    StoredPlan.objects.filter(run=interrupted_with_plan()).delete()

    assert grouping.groups().unplanned == 1
    html = " ".join(client_as("viewer").get("/runs/").content.decode().split())
    assert "1 stopped run has no current plan yet" in html


def test_a_blocked_runs_line_says_what_it_waits_for_and_no_price(facts):
    run = charge_unknown()
    stored_plans.refresh(run)

    row = row_of(client_as("viewer").get("/runs/").content.decode(), run)

    assert "blocked: a supervisor must settle publish/promote-charge before any resume" in row
    assert "$" not in row and "Resume:" not in row
    (listed,) = api_as("viewer").get("/api/v1/runs").json()["items"]
    assert listed["stop"]["blocked"].startswith("blocked: a supervisor must settle")


def test_a_run_whose_resume_failed_says_so_and_comes_before_fresh_failures(facts):
    resumed = resumed_then_interrupted()
    fresh = [stopped_in_process({"timeout": "publish/publish/after"}) for _ in range(2)]
    fresh.append(interrupted_with_plan())

    assert resumed.severity == Run.Severity.RESUME_FAILED
    order = [r.pk for r in inbox.inbox_page(inbox.InboxFilters(), None).runs]
    assert order.index(resumed.pk) < min(order.index(r.pk) for r in fresh)
    row = row_of(client_as("viewer").get("/runs/").content.decode(), resumed)
    assert re.search(r"resume-failed\">its resume failed: resumed once, it stopped again", row)


def test_migration_0022_gives_runs_resumed_before_it_their_rank(facts):
    migration = importlib.import_module("runs.migrations.0023_asks_and_resume_severity")
    resumed = resumed_then_interrupted()
    fresh = stopped_in_process({"timeout": "publish/publish/after"})
    # As ranked before: failed 4, interrupted 5.
    Run.objects.filter(pk=resumed.pk).update(severity=5)
    Run.objects.filter(pk=fresh.pk).update(severity=4)

    migration.forwards(apps, None)
    ranks = dict(Run.objects.filter(pk__in=[resumed.pk, fresh.pk]).values_list("pk", "severity"))
    assert ranks == {resumed.pk: Run.Severity.RESUME_FAILED, fresh.pk: Run.Severity.FAILED}

    migration.backwards(apps, None)
    ranks = dict(Run.objects.filter(pk__in=[resumed.pk, fresh.pk]).values_list("pk", "severity"))
    assert ranks == {resumed.pk: 5, fresh.pk: 4}

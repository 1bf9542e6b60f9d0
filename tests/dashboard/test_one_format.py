"""One format per quantity (issue 48, point 4): every page of the demo says money and token
counts one way (the `money` and `tokens` filters, runs/quantities.py); a run page's counts agree; a batch says what each of its
runs is doing."""

from __future__ import annotations

import io
import re
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.template.loader import render_to_string

from runs import quantities
from runs.models import Effect, Event, Gate, Run
from runs.planning import grouping, stored_plans
from runs.reads.run_page import run_page
from tests.support.plans import interrupted_with_plan
from tests.support.web import client_as

MONEY = re.compile(r"\$-?[0-9][0-9,]*(?:\.[0-9]+)?")
# Cents, or the ledger's four places; thousands separated.
ONE_FORMAT = re.compile(r"^\$[0-9]{1,3}(,[0-9]{3})*\.[0-9]{2}([0-9]{2})?$")
# A token count as the `tokens` filter says it: thousands separated ("1,033 tokens").
TOKENS = re.compile(r"\b([0-9][0-9,]*) (?:model )?tokens\b")
ONE_COUNT = re.compile(r"^[0-9]{1,3}(,[0-9]{3})*$")


def demo_pages() -> list[str]:
    """Every page the demo's runs have: the inbox, each run's page, timeline and plan, each
    effect and gate, each group, the pipelines and the workers."""
    pages = ["/runs/", "/pipelines/", "/pipelines/content/", "/workers/"]
    for run in Run.objects.all():
        pages += [f"/runs/{run.public_id}/{tail}" for tail in ("", "timeline/", "plan/")]
    pages += [f"/runs/run-{e.run_id}/effects/{e.pk}/" for e in Effect.objects.all()]
    pages += [f"/runs/run-{g.run_id}/gates/{g.pk}/" for g in Gate.objects.all()]
    pages += [f"/runs/groups/{g.fingerprint}/" for g in grouping.groups().groups]
    return pages


@pytest.mark.django_db(transaction=True)
def test_every_page_of_the_demo_says_money_and_token_counts_one_way(facts, redis_conn):
    call_command("seed_demo", stdout=io.StringIO())
    for run in Run.objects.filter(status__in=Run.RESUMABLE):
        stored_plans.refresh(run)
    supervisor = client_as("supervisor")

    said: dict[str, list[str]] = {}
    counts: dict[str, str] = {}
    doubled = []  # "$" before the money filter, which says it: "$$5.00"
    for path in demo_pages():
        response = supervisor.get(path)
        assert response.status_code == 200, path
        html = response.content.decode()
        for amount in MONEY.findall(html):
            said.setdefault(amount, []).append(path)
        for count in TOKENS.findall(html):
            counts.setdefault(count, path)
        if "$$" in html:
            doubled.append(path)

    assert len(said) > 5, said  # the demo's prices, charges and totals were all found
    assert doubled == []
    other = {a: paths[0] for a, paths in said.items() if not ONE_FORMAT.match(a)}
    assert other == {}
    # One amount, one text: no "$5.001" beside "$5.0010".
    canonical = {a: quantities.money(Decimal(a[1:].replace(",", ""))) for a in said}
    assert {a: c for a, c in canonical.items() if a != c} == {}
    assert any(int(c.replace(",", "")) >= 1000 for c in counts), counts  # big enough to tell
    assert {c: path for c, path in counts.items() if not ONE_COUNT.match(c)} == {}


@pytest.mark.django_db
def test_the_pipeline_index_says_the_stage_chain_once(db):
    html = client_as("viewer").get("/pipelines/").content.decode()
    assert html.count("research → draft → visual → prefill → publish") == 1


@pytest.mark.django_db
def test_the_status_line_counts_the_events_the_timeline_counts(facts):
    run = interrupted_with_plan()
    # The run as read before its last events were (a poll between two appends).
    stale = Run.objects.get(pk=run.pk)
    stale.last_seq -= 2
    page = run_page(stale, None)

    header = render_to_string(
        "runs/_header.html", {"page": page, "run": stale, "progress": page.progress}
    )

    total = Event.objects.filter(run=run).count()
    assert page.timeline.total == total
    assert f"· {total} events" in " ".join(header.split())

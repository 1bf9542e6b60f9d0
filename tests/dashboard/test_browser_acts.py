"""Issue 48 in a real browser (Debian's chromium, Playwright, the live test server; the demo's
crashed run made by real RQ workers): every button names what it does outside, in the tools'
verbs and money, and the drift that makes an upgrade an option; a blocked run's inbox line
says what it waits for, not a price; at a phone's width the first run is on the first screen
and the plan's decisive columns are in view without scrolling sideways. Screenshots go to
test-artifacts/."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from demo.simulators import publish_facts
from runs.planning import stored_plans
from tests.dashboard.test_browser import (  # noqa: F401 (fixtures)
    Problems,
    chromium,
    executed,
    fast_passwords,
    login,
    no_sideways_scroll,
    shot,
    users,
)
from tests.support.plans import TOPIC

pytestmark = pytest.mark.browser


@pytest.fixture
def phone(chromium: Browser) -> Iterator[Page]:  # noqa: F811
    context = chromium.new_context(viewport={"width": 390, "height": 844})
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


@pytest.fixture
def laptop(chromium: Browser) -> Iterator[Page]:  # noqa: F811
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


def test_the_bars_name_the_acts_of_the_crashed_run_and_the_drift_of_a_drifted_one(
    story_run,
    laptop,
    live_server,
    users,  # noqa: F811
):
    page, run = laptop, story_run
    problems = Problems()
    problems.watch(page)
    login(page, live_server, "operator")

    page.goto(f"{live_server.url}/runs/{run.public_id}/")
    strict = page.locator("#decision .option-strict")
    expect(strict).to_contain_text("publishes an article")
    expect(strict).to_contain_text("charges $5.00")
    # The confirmation ticks the same words.
    box = strict.get_by_label(
        re.compile(r"I have read the plan: it publishes an article, charges \$5\.00")
    )
    expect(box).to_be_visible()
    shot(page, "acts-strict-1280.png")

    # The article is live; newer facts appeared since the run pinned v3.
    drifted = executed(timeout="publish/publish/after")
    publish_facts(TOPIC)
    stored_plans.refresh(drifted)
    page.goto(f"{live_server.url}/runs/{drifted.public_id}/")
    bar = page.locator("#decision")
    expect(bar.locator(".option-strict")).to_contain_text("keeps facts v3 (facts v3 → v4")
    upgrade = bar.locator(".option-upgrade")
    expect(upgrade).to_contain_text("facts v3 → v4: publishes a second article")
    expect(
        upgrade.get_by_label(re.compile(r"I accept that it takes facts v3 → v4 and "))
    ).to_be_visible()
    shot(page, "acts-drift-1280.png")
    assert not problems, problems


def test_at_a_phones_width_the_first_run_and_the_plans_decisive_columns_are_in_view(
    story_run,
    phone,
    live_server,
    users,  # noqa: F811
):
    page, run = phone, story_run
    blocked = executed(timeout="publish/promote-charge/after")
    problems = Problems()
    problems.watch(page)
    login(page, live_server, "operator")

    # The inbox: the first run needing a human is on the first screen.
    rows = page.locator("#inbox-results tbody tr")
    expect(rows.first).to_be_in_viewport()
    no_sideways_scroll(page)
    # The blocked run says what it waits for, and no price ("$0.00" would read as free).
    line = rows.filter(has=page.get_by_role("link", name=blocked.public_id, exact=True))
    expect(line).to_contain_text("blocked: a supervisor must settle publish/promote-charge")
    expect(line.locator(".stake")).not_to_contain_text("$")
    shot(page, "inbox-first-screen-390.png")

    # The plan's table: what the resume does and what it costs come first.
    page.goto(f"{live_server.url}/runs/{run.public_id}/")
    table = page.locator("#plan-panel table.effects-plan")
    table.evaluate("t => window.scrollTo(0, t.getBoundingClientRect().top + window.scrollY - 80)")
    for name in ("The resume will", "Cost"):
        expect(table.get_by_role("columnheader", name=name)).to_be_in_viewport()
    assert table.evaluate("t => t.parentElement.scrollLeft") == 0  # nothing scrolled sideways
    # The decision keeps one line in view as the page scrolls.
    summary = page.locator("#decision .decision-state").bounding_box()
    assert summary["y"] == 0 and summary["height"] < 48, summary
    no_sideways_scroll(page)
    shot(page, "plan-columns-390.png")
    assert not problems, problems


def at_a_group_of_two(page: Page, live_server) -> None:
    """Two runs failed alike (their cover upload's answer lost), their group's page open
    to an operator."""
    from runs.planning import grouping

    alike = [executed(timeout="visual/upload-cover/after") for _ in range(2)]
    [group] = [g for g in grouping.groups().groups if g.count == len(alike)]
    login(page, live_server, "operator")
    page.goto(f"{live_server.url}/runs/groups/{group.fingerprint}/")


def test_at_a_phones_width_a_groups_page_does_not_scroll_sideways(
    phone,
    live_server,
    users,  # noqa: F811
    facts,
):
    page, problems = phone, Problems()
    problems.watch(page)

    at_a_group_of_two(page, live_server)

    expect(page.get_by_role("button", name="Approve the ticked runs only")).to_be_visible()
    no_sideways_scroll(page)
    shot(page, "group-390.png")
    assert not problems, problems


def test_a_group_approved_in_the_request_reloads_as_its_batch_page(
    laptop,
    live_server,
    users,  # noqa: F811
    facts,
):
    from runs.models import Event

    page, problems = laptop, Problems()
    problems.watch(page)
    at_a_group_of_two(page, live_server)

    page.get_by_label(re.compile("I have read the group's plan")).check()
    page.get_by_role("button", name="Approve all 2 runs shown").click()
    expect(page.get_by_role("heading", name="Approved 2, skipped 0")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/runs/batches/[0-9a-f]{32}/$"))
    page.reload()

    expect(page.get_by_role("heading", name=re.compile("Approved 2, skipped 0"))).to_be_visible()
    assert Event.objects.filter(type=Event.Type.PLAN_APPROVED).count() == 2
    assert not problems, problems


def test_at_a_phones_width_a_long_external_id_and_the_bulk_review_page_fit(
    phone,
    live_server,
    users,  # noqa: F811
    facts,
):
    from runs.ledger.edits import edit_effect
    from runs.models import Effect, Gate

    charged = executed(timeout="publish/promote-charge/after")
    charge = Effect.objects.get(run=charged, call_id="promote-charge")
    long_id = "ch-" + "7" * 125
    edit_effect(
        charge.pk,
        {"status": "confirmed", "external_id": long_id},
        reason="the processor's own id",
        actor="user:supervisor",
    )
    from demo.management.commands.seed_demo import run_inline
    from runs import engine

    reviews = [
        run_inline(engine.start_run("content", {"review": "on"}, actor="t", enqueue=False).pk)
        for _ in range(2)
    ]
    shape = Gate.objects.get(run=reviews[0], gate_id="review").shape
    page = phone
    problems = Problems()
    problems.watch(page)
    login(page, live_server, "supervisor")

    page.goto(f"{live_server.url}/runs/{charged.public_id}/effects/{charge.pk}/")
    expect(page.get_by_text(long_id).first).to_be_visible()
    no_sideways_scroll(page)
    shot(page, "effect-long-id-390.png")

    page.goto(f"{live_server.url}/runs/gate-groups/{shape}/")
    cell = page.locator("td.shown-for-review").first
    assert cell.bounding_box()["width"] >= 200  # read as lines, not a word a line
    no_sideways_scroll(page)
    shot(page, "gate-group-390.png")
    assert not problems, problems


def test_at_a_phones_width_a_blocked_runs_verdict_is_read_whole(
    phone,
    live_server,
    users,  # noqa: F811
):
    blocked = executed(timeout="publish/promote-charge/after")
    page = phone
    login(page, live_server, "supervisor")

    page.goto(f"{live_server.url}/runs/{blocked.public_id}/")

    verdict = page.locator("#decision .decision-state .decision-verdict")
    expect(verdict).to_have_text("Blocked: a supervisor decides first")
    assert verdict.evaluate("v => v.scrollWidth <= v.clientWidth"), "cut short"
    no_sideways_scroll(page)
    shot(page, "blocked-verdict-390.png")

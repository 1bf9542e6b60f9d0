"""Issue 24 in a real browser (Debian's chromium, Playwright, the live test server, real RQ
workers): an operator opens a run while it works and follows it, with no reload, through the
worker's death, the plan a worker stores, the strict resume and the verdict ("Plan kept");
then upgrades a drifted run only after reading, at the Upgrade button, its cost and that it
publishes a second article. Screenshots at 390x844 go to test-artifacts/."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from demo import faults
from demo.management.commands.seed_demo import run_inline
from demo.simulators import publish_facts
from runs.ledger.edits import edit_effect
from runs.models import Effect, Event, Run, StoredPlan
from runs.planning import stored_plans
from tests.dashboard.test_browser import (  # noqa: F401 (fixtures)
    ARTIFACTS,
    FINISH_TIMEOUT_MS,
    Problems,
    chromium,
    fast_passwords,
    login,
    users,
)
from tests.support.plans import TOPIC
from tests.support.processes import wait_for

pytestmark = pytest.mark.browser

# A phone's size, where the buttons and ticks this journey checks can fall out of view; the
# laptop's layout is the other browser journeys' (Playwright's default 1280x720).
SIZES = {"390": {"width": 390, "height": 844}}
# The sweeper's verdict comes within lease TTL + sweep interval; a worker then stores the plan.
STOP_TIMEOUT_MS = 150_000


@pytest.fixture(params=sorted(SIZES))
def sized(request, chromium):  # noqa: F811
    context = chromium.new_context(viewport=SIZES[request.param])
    context.set_default_timeout(15_000)
    yield context.new_page(), request.param
    context.close()


def snap(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))


def test_the_run_page_follows_a_run_to_plan_kept_then_an_upgrade_is_read_before_it_is_confirmed(
    sized,
    live_server,
    users,  # noqa: F811
    workers,
):
    page, size = sized
    problems = Problems()
    problems.watch(page)
    login(page, live_server, "operator")
    loads = []
    page.on("load", lambda: loads.append(page.url))

    run = faults.start_run(
        "content", {}, actor="test", faults={"crash": "visual/upload-cover/before"}
    )
    page.goto(f"{live_server.url}/runs/{run.public_id}/")
    doomed = workers.start()
    doomed.wait(timeout=120)  # SIGKILLed at the cover upload, its lease still held
    bar = page.locator("#decision")
    # Before the sweeper's verdict, the page says the worker went quiet.
    expect(bar).to_contain_text(re.compile(r"worker silent for \d+ s"), timeout=60_000)
    snap(page, f"resume-silent-{size}.png")
    workers.start()  # a healthy worker: its sweeper interrupts the run, it stores the plan
    expect(bar.locator(".badge")).to_have_text("Interrupted", timeout=STOP_TIMEOUT_MS)
    strict = bar.locator(".option-strict")
    expect(strict).to_contain_text("Strict resume:", timeout=STOP_TIMEOUT_MS)
    expect(page.locator("#plan-h")).to_have_text("Reconcile plan")
    assert len(loads) == 1, loads  # nothing reloaded: the page followed the run
    snap(page, f"resume-stopped-{size}.png")

    strict.get_by_label("I have read the plan").check()
    strict.get_by_role("button", name="Strict resume").click()
    expect(page.locator("#verdict-slot")).to_contain_text("Plan kept", timeout=FINISH_TIMEOUT_MS)
    expect(bar.locator(".badge")).to_have_text("Succeeded")
    expect(page.locator(".message-while-active")).to_have_count(0)
    assert len(loads) == 2, loads  # the approval's redirect, then no reload
    snap(page, f"resume-kept-{size}.png")

    # A drifted run whose article (and charge) are out there: the upgrade makes them again.
    drifted = faults.start_run(
        "content",
        {},
        actor="test",
        faults={"timeout": "publish/promote-charge/after"},
        enqueue=False,
    )
    drifted = run_inline(drifted.pk)
    charge = Effect.objects.get(run=drifted, call_id="promote-charge")
    edit_effect(charge.pk, {"status": "confirmed", "external_id": "ch-1"}, reason="r", actor="t")
    publish_facts(TOPIC)
    # The worker stores the plan the stop and the edit asked for; computed again here (the
    # facts moved since) only once its row exists: two first stores of one run's plan race
    # on the row's insert (stored_plans.store).
    wait_for(lambda: StoredPlan.objects.filter(run=drifted).exists(), what="the stored plan")
    plan = stored_plans.refresh(Run.objects.get(pk=drifted.pk))
    page.goto(f"{live_server.url}/runs/{drifted.public_id}/")
    upgrade = bar.locator(".option-upgrade")
    cost = f"up to {plan.upgrade.cost.tool_calls} calls, ${plan.upgrade.cost.money}"
    expect(upgrade).to_contain_text(cost)
    expect(upgrade).to_contain_text(re.compile(r"publishes a second article \(the first, \S+"))
    button = upgrade.get_by_role("button", name="Upgrade")
    expect(button).to_be_in_viewport()
    box = upgrade.get_by_label(re.compile("I accept that it .*publishes a second article"))
    expect(box).to_be_in_viewport()
    # Strict's tick does not confirm the upgrade: the browser refuses the unticked form.
    bar.locator(".option-strict").get_by_label("I have read the plan").check()
    button.click()
    assert not Event.objects.filter(run=drifted, type=Event.Type.PLAN_APPROVED).exists()
    snap(page, f"upgrade-at-the-button-{size}.png")
    box.check()
    button.click()
    expect(page.get_by_role("status")).to_contain_text("superseded by the new branch")
    approved = Event.objects.get(run=drifted, type=Event.Type.PLAN_APPROVED)
    assert approved.payload["action"] == "upgrade"
    assert Run.objects.get(pk=drifted.pk).status == Run.Status.SUPERSEDED
    snap(page, f"upgrade-branch-{size}.png")
    assert not problems, problems

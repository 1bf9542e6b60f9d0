"""The typo journey in a real browser: Debian's chromium driven by Playwright against the live
test server, with a real RQ worker and the demo's card processor keeping its own charges.

    a supervisor types `abc` for the charge's amount: the preview names the field's error and
    nothing is recorded; they type 75.00 (under the confirmation's $100.00 ceiling, over the
    card's $50.00 limit), tick the act and send it; the card processor declines it and the run
    fails; the run page says what the target answered and offers Ask again; the gate reopens
    showing the refused attempt; the supervisor corrects the amount to 20.00, ticks and sends;
    exactly one charge is made, for 20.00, and the run succeeds.

Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from runs import engine
from runs.models import Effect, Event, Run
from tests.dashboard import test_browser as browser
from tests.dashboard import test_browser_gates as gates

pytestmark = pytest.mark.browser

chromium = browser.chromium
fast_passwords = browser.fast_passwords
page = browser.page
users = browser.users
FINISH_TIMEOUT_MS = browser.FINISH_TIMEOUT_MS
Problems, login, shot = browser.Problems, browser.login, browser.shot


def charge_answers(run: Run) -> int:
    return gates.answers_to(run, "promote-charge")


def send_amount(page: Page, amount: str) -> None:
    """Enter the amount, tick the act the approval names, and send the answer."""
    page.get_by_label("amount").fill(amount)
    page.get_by_label("I confirm that approving", exact=False).check()
    page.get_by_role("button", name="Send the answer").click()


def test_a_typo_is_refused_a_declined_charge_is_asked_again_and_charged_once(
    chromium, page, live_server, users, workers, demo_service
):
    problems = Problems()
    problems.watch(page)
    workers.start()
    run = engine.start_run("content", {"review": "on"}, actor="test")
    gates.review_the_draft(page, live_server, run)
    charge = gates.waiting_at(run, "promote-charge")
    gate_url = f"{live_server.url}/runs/{run.public_id}/gates/{charge.pk}/"

    page.context.clear_cookies()
    login(page, live_server, "supervisor")
    page.goto(gate_url)

    # A typo: the preview names the amount's error, and nothing is recorded.
    page.get_by_label("amount").fill("abc")
    page.get_by_role("button", name="Preview the changes").click()
    expect(page.locator("#gate-diff")).to_contain_text("does not fit the form yet")
    expect(page.locator("#gate-diff")).to_contain_text("amount")
    shot(page, "typo-abc-preview.png")
    assert charge_answers(run) == 0

    # A valid amount the card processor declines (its limit is $50.00).
    send_amount(page, "75.00")
    expect(page).to_have_url(f"{live_server.url}/runs/{run.public_id}/")
    expect(page.locator("#run-status")).to_have_text("Failed", timeout=FINISH_TIMEOUT_MS)
    assert demo_service.charges() == []
    # The plan (computed by a worker) says what the target answered and offers Ask again.
    ask_again = page.locator("#ask-again")
    expect(ask_again).to_contain_text("card declined", timeout=FINISH_TIMEOUT_MS)
    expect(page.get_by_text("a supervisor recorded")).to_have_count(0)
    shot(page, "typo-declined-run.png")
    ask_again.get_by_role("button", name="Ask again").click()

    # The reopened gate shows the refused attempt; the corrected amount is charged once.
    expect(page).to_have_url(gate_url)
    attempts = page.locator("#attempts")
    expect(attempts).to_contain_text("75.00")
    expect(attempts).to_contain_text("card declined")
    shot(page, "typo-asked-again.png")
    send_amount(page, "20.00")
    expect(page).to_have_url(f"{live_server.url}/runs/{run.public_id}/")
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=FINISH_TIMEOUT_MS)

    assert [c["amount"] for c in demo_service.charges()] == ["20.00"]
    charged = Effect.objects.get(run=run, call_id="promote-charge", status="confirmed")
    assert charged.cost == 20
    assert Event.objects.filter(run=run, type=Event.Type.GATE_REOPENED).count() == 1
    assert not problems, problems

"""A reviewed run in a real browser: Debian's chromium driven by Playwright against the live
test server, with a real RQ worker.

    a reviewed demo run (review=on) waits at its review; an operator opens the gate from the
    inbox, edits the title, previews the diff and approves; the worker publishes exactly one
    article, with the edited title; the run then waits for a supervisor to confirm the
    promotion charge; the operator sees no form there and a POST of theirs is refused (403);
    a supervisor reads what the charge is for, is refused without the tick naming the charge,
    ticks it and approves; exactly one charge is made and the run succeeds.

The inbox and both gate pages are also looked at on a phone (390×844): no page scrolls
sideways. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from runs import engine
from runs.models import Event, Gate, GateStatus, Run
from tests.dashboard import test_browser as browser
from tests.support.processes import wait_for

pytestmark = pytest.mark.browser

# The browser, its page and the users, as the dashboard's other browser tests have them.
chromium = browser.chromium
fast_passwords = browser.fast_passwords
page = browser.page
users = browser.users
ARTIFACTS, FINISH_TIMEOUT_MS = browser.ARTIFACTS, browser.FINISH_TIMEOUT_MS
Problems, login, no_sideways_scroll, shot = (
    browser.Problems,
    browser.login,
    browser.no_sideways_scroll,
    browser.shot,
)

EDITED_TITLE = "Resumable agents, reviewed by a person"
PHONE = {"width": 390, "height": 844}


def waiting_at(run: Run, gate_id: str) -> Gate:
    """The run's open gate `gate_id`, once the worker has stopped the run there."""

    def found() -> Gate | None:
        run.refresh_from_db()
        if run.status != Run.Status.WAITING:
            return None
        return Gate.objects.filter(run=run, gate_id=gate_id, status=GateStatus.OPEN).first()

    return wait_for(found, timeout=FINISH_TIMEOUT_MS / 1000, what=f"the run waiting at {gate_id}")


def on_a_phone(chromium: Browser, live_server, username: str, path: str, name: str) -> None:
    """The page as `username` sees it at 390×844: it must not scroll sideways."""
    context = chromium.new_context(viewport=PHONE)
    context.set_default_timeout(15_000)
    phone = context.new_page()
    problems = Problems()
    problems.watch(phone)
    try:
        login(phone, live_server, username)
        phone.goto(f"{live_server.url}{path}")
        no_sideways_scroll(phone)
        shot(phone, f"{name}.png")
        # What a phone shows at once: the top, and the form scrolled into view.
        phone.screenshot(path=str(ARTIFACTS / f"{name}-top.png"))
        if phone.locator("#answer").count():
            phone.locator("#answer").scroll_into_view_if_needed()
            phone.screenshot(path=str(ARTIFACTS / f"{name}-answer.png"))
    finally:
        context.close()
    assert not problems, problems


def answers_to(run: Run, gate_id: str) -> int:
    return Event.objects.filter(
        run=run, type=Event.Type.HUMAN_ANSWERED, payload__gate=gate_id
    ).count()


def review_the_draft(page: Page, live_server, run: Run) -> Gate:
    """The operator finds the review in the inbox's first group, edits the title, previews
    the diff and sends the answer."""
    gate = waiting_at(run, "review")
    login(page, live_server, "operator")
    waiting = page.locator("#waiting-gates")
    expect(waiting).to_contain_text("Waiting for a decision")
    row = waiting.get_by_role("row").filter(has=page.get_by_role("link", name=run.public_id))
    expect(row).to_contain_text("publish/review")
    no_sideways_scroll(page)
    shot(page, "gates-inbox-1366px.png")

    row.get_by_role("link", name=gate.question).click()
    expect(page.get_by_role("heading", name=gate.question)).to_be_visible()
    # What the reviewer needs: the draft's text and the rendered cover.
    expect(page.locator("#context img.preview").first).to_be_visible()
    page.get_by_label("Title").fill(EDITED_TITLE)
    page.get_by_role("button", name="Preview the changes").click()
    diff = page.locator("#gate-diff")
    expect(diff).to_contain_text("changes 1 value")
    expect(diff.locator("ins")).to_have_text(EDITED_TITLE)
    assert answers_to(run, "review") == 0  # a preview records nothing
    no_sideways_scroll(page)
    shot(page, "gate-review-preview-1366px.png")

    page.get_by_role("button", name="Send the answer").click()
    expect(page).to_have_url(f"{live_server.url}/runs/{run.public_id}/")
    expect(page.get_by_role("status")).to_contain_text("Answered publish/review")
    return gate


def operator_is_refused(page: Page, live_server, run: Run, charge: Gate) -> None:
    url = f"{live_server.url}/runs/{run.public_id}/gates/{charge.pk}/"
    page.goto(url)
    expect(page.locator("#answer")).to_contain_text("This gate is for a supervisor to answer")
    expect(page.get_by_role("button", name="Send the answer")).to_have_count(0)
    # A POST made anyway (the page offered none) is refused by the server.
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(
        f"{url}answer/", form={"decision": "approve"}, headers={"X-CSRFToken": csrf}
    )
    assert response.status == 403
    assert answers_to(run, "promote-charge") == 0


def test_a_review_and_a_charge_confirmation_in_the_browser(
    chromium, page, live_server, users, workers, demo_service
):
    problems = Problems()
    problems.watch(page)
    workers.start()
    run = engine.start_run("content", {"review": "on"}, actor="test")

    waiting = waiting_at(run, "review")
    on_a_phone(chromium, live_server, "operator", "/runs/", "gates-inbox-390px")
    review_path = f"/runs/{run.public_id}/gates/{waiting.pk}/"
    on_a_phone(chromium, live_server, "operator", review_path, "gate-review-390px")
    review = review_the_draft(page, live_server, run)

    # The worker publishes exactly one article, with the edited title, then asks the
    # supervisor about the charge.
    charge = waiting_at(run, "promote-charge")
    assert [a["title"] for a in demo_service.articles()] == [EDITED_TITLE]
    assert demo_service.charges() == []
    answered = Event.objects.get(run=run, type=Event.Type.HUMAN_ANSWERED, payload__gate="review")
    assert answered.actor == "user:operator"
    assert answered.payload["diff"] == {"title": [review.initial["title"], EDITED_TITLE]}

    operator_is_refused(page, live_server, run, charge)
    gate_path = f"/runs/{run.public_id}/gates/{charge.pk}/"
    on_a_phone(chromium, live_server, "supervisor", gate_path, "gate-charge-390px")

    # The supervisor approves the charge as asked.
    page.context.clear_cookies()
    login(page, live_server, "supervisor")
    page.goto(f"{live_server.url}{gate_path}")
    call = page.locator("#call")
    expect(call).to_contain_text("charge_card")
    expect(call).to_contain_text("NEVER")
    expect(call.get_by_role("row").filter(has_text="amount")).to_contain_text("editable")
    # What the charge is for, rendered from the Confirm's markdown description.
    expect(page.locator("#details strong").first).to_have_text("The promotion fee")
    no_sideways_scroll(page)
    shot(page, "gate-charge-1366px.png")
    # Approving money needs the tick that names the act: without it nothing is recorded.
    page.get_by_role("button", name="Send the answer").click()
    expect(page.locator("#answer").get_by_role("alert")).to_contain_text("to approve")
    assert answers_to(run, "promote-charge") == 0
    page.get_by_label("I confirm that approving charges $5.00 to acct-42 (card)").check()
    page.get_by_role("button", name="Send the answer").click()
    expect(page).to_have_url(f"{live_server.url}/runs/{run.public_id}/")
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=FINISH_TIMEOUT_MS)

    assert len(demo_service.charges()) == 1
    assert len(demo_service.articles()) == 1
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    page.goto(f"{live_server.url}{gate_path}")
    expect(page.locator("#history")).to_contain_text("user:supervisor")
    shot(page, "gate-charge-answered-1366px.png")
    assert ARTIFACTS.exists()
    # The one answer refused on purpose (no tick) is the 400 the browser reports.
    expected = r"/admin/|/gates/\d+/answer/: .* status of 400"
    assert not [p for p in problems if not re.search(expected, p)], problems

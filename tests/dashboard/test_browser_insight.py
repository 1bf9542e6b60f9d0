"""Issue 47, item 6, in a real browser (Debian's chromium, Playwright, the live test server):
an operator opens a failed run's page and reads, in its collapsible stage log, the traceback
the stage function raised and the lines it logged, as text (markup in them is shown, never
run). A screenshot goes to test-artifacts/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.dashboard.test_browser import (  # noqa: F401 (fixtures)
    Problems,
    chromium,
    fast_passwords,
    login,
    page,
    shot,
    users,
)
from tests.support import failing
from tests.support.pipelines import registered

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def pipeline(settings):
    with registered(settings, failing.PATH):
        yield


def test_an_operator_reads_the_traceback_and_log_lines_of_a_failed_run(
    page,  # noqa: F811
    live_server,
    users,  # noqa: F811
):
    run = failing.failed_run("raise")
    problems = Problems()
    problems.watch(page)
    login(page, live_server, "operator")

    page.goto(f"{live_server.url}/runs/{run.public_id}/")
    logs = page.locator("#stage-logs")
    entry = logs.locator("details.stage-log").first
    entry.locator("summary").click()  # open for a stopped run: this closes it
    expect(entry.locator("pre.stage-traceback")).to_be_hidden()
    entry.locator("summary").click()

    traceback = entry.locator("pre.stage-traceback")
    expect(traceback).to_be_visible()
    expect(traceback).to_contain_text("in reconcile_totals")
    expect(traceback).to_contain_text("ValueError: ledger total 12 != 13 <b>not bold</b>")
    lines = entry.locator("pre.stage-lines")
    expect(lines).to_contain_text("checking invoice 1 <script>alert('x')</script>")
    expect(lines).to_contain_text("WARNING runs.tests.failing totals disagree")
    expect(entry.locator("summary")).to_contain_text("check · attempt 0")
    shot(page, "stage-log.png")
    assert problems == []

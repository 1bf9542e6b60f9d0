"""The dashboard in a real browser: Debian's chromium driven by Playwright against the live
test server, with real RQ workers for the story.

    an operator finds the story's interrupted run, reads its plan, approves a strict resume
    and watches the timeline until the run succeeds, without reloading;
    a viewer reads the same plan and finds no approve control;
    a supervisor resolves a blocked NEVER effect in the admin, with a reason, and the plan
    unblocks.

    at 1366×900 and 390×844, an operator triages the inbox by reason (each row says why its
    run stopped and what resuming costs), opens the story's run and approves it from the
    summary kept at the top of the run page, without scrolling to the plan; the pipeline page
    draws its charts; no page scrolls sideways.

Screenshots of the inbox, the run page, the plan and the pipeline page go to test-artifacts/.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from demo import faults
from demo.management.commands.seed_demo import run_inline
from runs.access import roles
from runs.events import ToolResult
from runs.ledger import leases
from runs.ledger.append import Writer, append
from runs.models import Event, Run
from runs.planning import stored_plans
from tests.support.plans import resumed_inline

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# How long a worker may take to finish the story's remaining stages on a busy machine.
FINISH_TIMEOUT_MS = 120_000


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    executable = shutil.which("chromium")
    if executable is None:
        # Not a skip: a missing browser must not pass for a working dashboard.
        pytest.fail(
            "chromium is not on PATH. The browser tests drive Debian's chromium: install it "
            "with `apt-get install chromium` (`make test` does so when run as root).",
            pytrace=False,
        )
    # Playwright's sync API keeps an asyncio loop in this thread, so Django's guard against
    # ORM calls from async code would trip on the plain synchronous queries these tests make
    # (fixtures, teardown's flush) between browser steps.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(autouse=True)
def fast_passwords(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def users(transactional_db, facts) -> None:
    for role in roles.ROLES:
        roles.ensure_user(role, f"{role}-demo-pass", role)


class Problems(list):
    """Console errors and CSP violations a page reports; a test asserts there are none."""

    def watch(self, page: Page) -> None:
        def on_console(message: ConsoleMessage) -> None:
            if message.type == "error" or "Content Security Policy" in message.text:
                self.append(f"{page.url}: {message.text}")

        page.on("console", on_console)
        page.on("pageerror", lambda error: self.append(f"{page.url}: {error}"))


@pytest.fixture
def page(chromium: Browser) -> Iterator[Page]:
    context = chromium.new_context(viewport={"width": 1366, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def login(page: Page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(f"{username}-demo-pass")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()


def executed(**options) -> Run:
    """A run executed here until it stops, with the plan its stop has a worker compute."""
    run = faults.start_run("content", {}, actor="test", faults=options, enqueue=False)
    run = run_inline(run.pk)
    if run.is_resumable:
        stored_plans.refresh(run)
    return run


def test_operator_resumes_the_story_and_watches_it_succeed(story_run, page, live_server, users):
    run = story_run
    problems = Problems()
    problems.watch(page)
    login(page, live_server, "operator")

    # The inbox: the interrupted run first, as one that needs a human.
    row = page.get_by_role("row").filter(
        has=page.get_by_role("link", name=run.public_id, exact=True)
    )
    expect(row).to_contain_text("Interrupted")
    expect(page.get_by_text("1 run needs a human")).to_be_visible()
    shot(page, "inbox.png")

    # The run page: where it stopped, and what it did before.
    row.get_by_role("link", name=run.public_id, exact=True).click()
    expect(page.locator("#run-status")).to_have_text("Interrupted")
    expect(page.locator("#timeline")).to_contain_text("the worker stopped renewing its lease")
    expect(page.locator(".step-stopped")).to_contain_text("visual")
    shot(page, "run-page.png")

    # The plan: resume at visual; the images already made are reused; the cover is retried
    # with the same key.
    page.get_by_role("link", name="Read the reconcile plan").click()
    expect(page.get_by_role("heading", name=f"Plan for {run.public_id}")).to_be_visible()
    plan = page.locator("#plan-panel")
    expect(plan).to_contain_text("A strict resume starts at stage visual")
    expect(plan.get_by_role("row").filter(has_text="render-body-1")).to_contain_text(
        "Reuse the recorded result"
    )
    expect(plan.get_by_role("row").filter(has_text="upload-cover")).to_contain_text(
        "Call again with the same key"
    )
    expect(plan).to_contain_text("A fresh retry from step one (not offered)")
    expect(plan.get_by_role("button", name="Upgrade inputs into a new branch")).to_be_disabled()
    shot(page, "plan.png")

    # The confirmation step: without the tick the browser does not send the form.
    strict = page.locator("form.approve-strict")
    expect(strict).to_contain_text(f"This will resume {run.public_id} at visual")
    strict.get_by_role("button", name="Strict resume").click()
    expect(page).to_have_url(re.compile(r"/plan/$"))
    assert not Event.objects.filter(run=run, type=Event.Type.PLAN_APPROVED).exists()

    strict.get_by_label("I have read the plan").check()
    strict.get_by_role("button", name="Strict resume").click()
    expect(page).to_have_url(f"{live_server.url}/runs/{run.public_id}/")
    expect(page.get_by_role("status")).to_contain_text("is resuming with its pinned inputs")

    # From here on the page is never reloaded: the timeline polls and brings the header.
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=FINISH_TIMEOUT_MS)
    expect(page.locator("#timeline")).to_contain_text("publish_article")
    expect(
        page.locator("#timeline").get_by_role("cell", name="Succeeded", exact=True)
    ).to_be_visible()
    expect(page.locator("#progress-label")).to_have_text(
        "Pipeline progress: 5 of 5 stages verified"
    )
    expect(page.locator("#checkpoints")).to_contain_text(f"{run.public_id}:publish-verified")
    # Polling stopped with the run: the last copy of the timeline has no poll form.
    expect(page.locator("#timeline-poll")).to_have_count(0)
    assert navigations == []
    shot(page, "run-succeeded.png")

    assert Event.objects.filter(run=run, type=Event.Type.PLAN_APPROVED).count() == 1
    assert not problems, problems


EVIL = '<script>alert("x")</script><img src=x onerror=alert(2)><b hx-post="/logout/" hx-trigger="load">'


def test_viewer_reads_the_plan_but_has_no_approve_control(page, live_server, users):
    run = executed(timeout="visual/render-cover/after")
    # An agent's tool result with markup in it: it must read as text and do nothing.
    token = leases.acquire(run.pk, "test", takeover=True)
    append(
        Writer(run.pk, token, "test"),
        ToolResult(stage="visual", call="render-cover", tool="render_image", error=EVIL),
    )
    leases.release(run.pk, token)
    problems = Problems()
    problems.watch(page)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    posts: list[str] = []
    page.on(
        "request", lambda request: posts.append(request.url) if request.method == "POST" else None
    )
    login(page, live_server, "viewer")
    posts.clear()
    page.get_by_role("link", name=run.public_id, exact=True).click()
    expect(page.locator("#plan-panel")).to_contain_text("A strict resume starts at stage visual")
    expect(page.locator("#timeline").get_by_text(EVIL)).to_be_visible()
    assert dialogs == [] and posts == []
    page.goto(f"{live_server.url}/runs/{run.public_id}/plan/")
    expect(page.locator("#plan-panel")).to_contain_text(
        "Approving a resume needs the operator role"
    )
    expect(page.get_by_role("button", name="Strict resume")).to_have_count(0)
    expect(page.get_by_role("button", name="Upgrade inputs into a new branch")).to_have_count(0)
    expect(page.get_by_role("checkbox")).to_have_count(0)
    # The admin is not for viewers.
    page.goto(f"{live_server.url}/admin/")
    expect(page).to_have_url(re.compile(r"/admin/login/"))
    assert not problems, problems


def test_supervisor_resolves_a_blocked_never_effect_and_the_plan_unblocks(page, live_server, users):
    run = executed(timeout="publish/promote-charge/after")
    problems = Problems()
    problems.watch(page)
    login(page, live_server, "supervisor")
    page.goto(f"{live_server.url}/runs/{run.public_id}/plan/")
    blockers = page.get_by_role("alert")
    expect(blockers).to_contain_text("charge_card (promote-charge) is NEVER")
    expect(page.get_by_role("button", name="Strict resume")).to_be_disabled()

    # The blocker links straight to the unsettled effect; its page leads to the ledger edit.
    blockers.get_by_role("link", name=re.compile(r"^Settle ")).click()
    expect(page).to_have_url(re.compile(r"/effects/\d+/$"))
    page.get_by_role("link", name="edit the ledger with a reason").click()
    expect(page.get_by_role("heading", name="Change effect")).to_be_visible()
    page.get_by_label("Status").select_option("failed")

    # Without a reason nothing is saved.
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".errorlist")).to_contain_text("This field is required.")
    assert not Event.objects.filter(run=run, type=Event.Type.LEDGER_EDITED).exists()
    shot(page, "admin-effect-reason-required.png")

    page.get_by_label("Reason").fill("Checked with the card processor: no charge was made.")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("LEDGER_EDITED")

    page.goto(f"{live_server.url}/runs/{run.public_id}/plan/")
    # No worker runs here to recompute the plan the edit asked for: the page says the run
    # changed since its plan, and the supervisor asks the targets again.
    expect(page.locator("#plan-panel")).to_contain_text("the run changed since")
    page.get_by_role("button", name="Check targets again").click()
    expect(page.get_by_text("Blocked: a human decides first")).to_have_count(0)
    charge = page.locator("#plan-panel").get_by_role("row").filter(has_text="promote-charge")
    expect(charge).to_contain_text("a supervisor recorded that it did not happen")
    expect(page.get_by_role("button", name="Strict resume")).to_be_enabled()
    shot(page, "plan-unblocked.png")
    edit = Event.objects.get(run=run, type=Event.Type.LEDGER_EDITED)
    assert edit.actor == "user:supervisor"
    # Dashboard pages only: the admin carries its own inline scripts outside our CSP.
    assert not [p for p in problems if "/admin/" not in p], problems


# --- At a glance: the decision in view, and the pipeline page, at laptop and phone sizes -----

# A phone's size: what a laptop shows is shown by the journeys above (Playwright's default
# 1280x720); a phone is where a page scrolls sideways or a control falls out of view, so each
# journey here runs once, at the size that can fail it.
SIZES = {"390": {"width": 390, "height": 844}}


@pytest.fixture(params=sorted(SIZES), ids=lambda key: f"{key}px")
def sized_page(request, chromium: Browser) -> Iterator[tuple[Page, str]]:
    """A page at a laptop's or a phone's size, and the size's name for screenshots."""
    context = chromium.new_context(viewport=SIZES[request.param])
    context.set_default_timeout(15_000)
    yield context.new_page(), f"{request.param}px"
    context.close()


def no_sideways_scroll(page: Page) -> None:
    overflow = page.evaluate(
        "[document.documentElement.scrollWidth, window.innerWidth, "
        "[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right"
        " > window.innerWidth + 1).slice(0, 5).map(e => e.tagName + '.' + e.className)]"
    )
    width, viewport, culprits = overflow
    assert width <= viewport, f"page is {width}px wide in a {viewport}px viewport: {culprits}"


def test_operator_triages_the_inbox_by_reason_then_approves_from_the_summary(
    story_run, sized_page, live_server, users
):
    (page, size), run = sized_page, story_run
    # Beside the story's interrupted run, one that failed for another reason: its promotion
    # charge's outcome is unknown, so its plan is blocked.
    charge = executed(timeout="publish/promote-charge/after")
    problems = Problems()
    problems.watch(page)
    login(page, live_server, "operator")

    # The inbox says why each run stopped and what resuming it costs, without opening it.
    rows = page.locator("#inbox-results tbody tr")
    story_row = rows.filter(has=page.get_by_role("link", name=run.public_id, exact=True))
    charge_row = rows.filter(has=page.get_by_role("link", name=charge.public_id, exact=True))
    expect(story_row).to_contain_text("worker lost during upload-cover")
    expect(story_row).to_contain_text("vs fresh retry")
    expect(charge_row).to_contain_text("promote-charge timed out: a supervisor must decide")
    expect(charge_row).to_contain_text("Blocked")
    no_sideways_scroll(page)
    shot(page, f"inbox-{size}.png")

    # Triage by reason: only the interrupted run is left (htmx swaps the rows in place).
    page.get_by_label("Why it stopped").select_option("interrupted")
    expect(page).to_have_url(re.compile(r"reason=interrupted"))
    expect(rows).to_have_count(1)
    expect(story_row).to_contain_text("the resume retries it with the same key")
    no_sideways_scroll(page)
    shot(page, f"inbox-triaged-{size}.png")

    # Open the run: the decision is at the top.
    story_row.get_by_role("link", name=run.public_id, exact=True).click()
    expect(page).to_have_url(f"{live_server.url}/runs/{run.public_id}/")
    bar = page.locator("#decision")
    expect(bar).to_contain_text("Interrupted")
    expect(bar).to_contain_text("Resumable at visual")
    expect(bar).to_contain_text("fresh retry")
    # History up to the resume checkpoint is folded away.
    settled = page.locator("details.settled-history")
    expect(settled).to_contain_text(f"before {run.public_id}:draft-verified")
    expect(settled).not_to_have_attribute("open", "")
    no_sideways_scroll(page)
    shot(page, f"run-decision-{size}.png")

    # Down at the timeline, the plan's own buttons are out of sight; on a phone the summary
    # keeps one line in view (issue 48), whose "Decide" brings its buttons back.
    page.locator("nav.toc").get_by_role("link", name="Timeline").click()
    expect(page).to_have_url(re.compile(r"#timeline$"))
    # The section lands below the summary's line, not under it.
    line = bar.locator(".decision-state")
    heading, summary = page.locator("#timeline-h").bounding_box(), line.bounding_box()
    assert heading["y"] >= summary["y"] + summary["height"] - 1, (heading, summary)
    assert summary["height"] < 48, summary  # one line
    expect(line).to_be_in_viewport()
    expect(page.locator("#approve-h")).not_to_be_in_viewport()
    strict = bar.get_by_role("button", name="Strict resume")
    line.get_by_role("link", name="Decide").click()
    expect(strict).to_be_in_viewport()
    expect(bar.get_by_role("button", name="Upgrade")).to_be_disabled()
    page.screenshot(path=str(ARTIFACTS / f"run-decision-scrolled-{size}.png"))

    bar.get_by_label("I have read the plan").check()
    strict.click()
    expect(page.get_by_role("status")).to_contain_text("is resuming with its pinned inputs")
    approved = Event.objects.get(run=run, type=Event.Type.PLAN_APPROVED)
    assert (approved.payload["action"], approved.payload["by"]) == ("strict", "user:operator")
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=FINISH_TIMEOUT_MS)
    expect(bar).to_contain_text("Succeeded")
    no_sideways_scroll(page)
    assert not problems, problems


def test_pipeline_page_renders_its_charts(sized_page, live_server, users):
    page, size = sized_page
    executed()
    resumed_inline({"timeout": "visual/render-cover/after"})
    problems = Problems()
    problems.watch(page)
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/pipelines/content/")
    expect(page.get_by_role("heading", name="Where checkpoints pay")).to_be_visible()
    charts = page.locator("svg.bars")
    expect(charts).to_have_count(3)
    for index in range(3):
        chart = charts.nth(index)
        expect(chart.locator("g.bar-row")).to_have_count(5)
        widths = chart.locator("rect.bar").evaluate_all(
            "bars => bars.map(b => b.getBoundingClientRect().width)"
        )
        assert max(widths) > 0, f"chart {index} has no visible bar"
    expect(page.locator("#chart-saved")).to_contain_text("draft:")
    expect(page.locator(".verdict-row").filter(has_text="publish")).to_contain_text(
        "checkpoint pays"
    )
    no_sideways_scroll(page)
    shot(page, f"pipeline-{size}.png")
    # The window is chosen on the page.
    page.get_by_label("Look at the last").select_option("10")
    page.get_by_role("button", name="Show").click()
    expect(page).to_have_url(re.compile(r"\?runs=10$"))
    assert not problems, problems

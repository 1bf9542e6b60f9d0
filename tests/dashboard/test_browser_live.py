"""Issue 48, item 2, in a real browser (Debian's chromium, Playwright, the live test server, real
RQ workers): an operator has the inbox open at 1280×900 when a worker dies holding a run; once
the sweeper has handed the run to a human, the "N new" notice shows in the first screen within
5 s, the rows under the pointer stay where they were, and a click shows the run. A screenshot
goes to test-artifacts/.

Item 5: the run page of a moving run gets only the events after its last one and adds them
under its tables, each once, in order; while nothing moves its polls are answered with nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from playwright.sync_api import Browser, Page, expect

from demo import faults
from runs.ledger import leases
from runs.ledger.append import Writer, append
from runs.models import Lease, Run
from tests.dashboard.test_browser import (  # noqa: F401 (fixtures)
    Problems,
    chromium,
    fast_passwords,
    login,
    shot,
    users,
)
from tests.support import events, failing
from tests.support.pipelines import registered
from tests.support.processes import wait_for
from tests.support.state import run_status

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1280, 900


@pytest.fixture(autouse=True)
def pipeline(settings):
    with registered(settings, failing.PATH):
        yield


@pytest.fixture
def screen(chromium: Browser) -> Iterator[Page]:  # noqa: F811
    context = chromium.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


def holding_worker_dies(workers, tmp_path) -> Run:
    """A run whose worker holds its lease mid-stage and is killed (SIGKILL); a second worker
    is started, whose sweeper marks the run interrupted once the lease runs out."""
    env = {
        "RESUMER_PIPELINES": ",".join(settings.RESUMER_PIPELINES),
        # Never created: the stage holds its lease until the worker is killed.
        failing.RELEASE_ENV: str(tmp_path / "never"),
    }
    run = failing.start("hold", enqueue=True)
    doomed = workers.start("doomed", env=env)
    wait_for(lambda: Lease.objects.filter(run=run).exclude(holder="").exists(), what="a holder")
    workers.stop(doomed)
    workers.start("sweeper", env=env)
    return run


def test_a_run_that_crashes_while_the_inbox_is_open_shows_in_its_first_screen_at_once(
    screen,
    live_server,
    users,  # noqa: F811
    workers,
    tmp_path,
):
    page = screen
    problems = Problems()
    problems.watch(page)
    older = failing.failed_run("raise")
    login(page, live_server, "operator")
    first = page.get_by_role("row").filter(
        has=page.get_by_role("link", name=older.public_id, exact=True)
    )
    where = first.bounding_box()
    notice = page.locator("#inbox-news .news-button")
    expect(notice).to_have_count(0)

    run = holding_worker_dies(workers, tmp_path)
    wait_for(lambda: run_status(run) == Run.Status.INTERRUPTED, what="the sweeper's verdict")
    # From the moment the run needs a human: the next poll brings the notice.
    expect(notice).to_be_visible(timeout=5_000)
    expect(notice).to_contain_text("1 new")
    box = notice.bounding_box()
    assert page.evaluate("window.scrollY") == 0
    assert box["y"] >= 0 and box["y"] + box["height"] <= HEIGHT, box
    assert box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, box
    assert first.bounding_box() == where  # the notice moved no row
    shot(page, "inbox-news-1280px.png")

    notice.click()
    expect(page.get_by_role("link", name=run.public_id, exact=True)).to_be_visible()
    expect(notice).to_have_count(0)
    assert not problems, problems


def test_the_run_page_adds_a_moving_runs_new_events_under_its_tables(
    screen,
    live_server,
    users,  # noqa: F811
):
    page = screen
    problems = Problems()
    problems.watch(page)
    run = faults.start_run("content", {}, actor="test", faults={}, enqueue=False)
    # The test is the worker and renews nothing: its lease must outlast a login and a page load
    # on a loaded machine, which the suite's 4-second TTL did not (CI lost it once).
    token = leases.acquire(run.pk, "worker:test", ttl=600, takeover=True)
    writer = Writer(run.pk, token, "worker:test")
    append(writer, events.started("research"))
    login(page, live_server, "operator")
    page.goto(f"{live_server.url}/runs/{run.public_id}/")
    polls = []
    page.on("response", lambda r: polls.append(r.status) if "/timeline/" in r.url else None)

    for n in (1, 2):
        append(writer, events.called(n))
        append(writer, events.result(n))
    append(writer, events.started("draft"))
    last = Run.objects.get(pk=run.pk).last_seq
    expect(page.locator("#timeline-last")).to_have_text(str(last))
    expect(page.locator("#timeline-total")).to_have_text(str(last))

    # Every event once, in order: the research calls under the research table, the draft
    # stage in a table of its own.
    timeline = page.locator("#timeline")
    seqs = [int(s) for s in timeline.locator("tbody th[scope=row]").all_inner_texts()]
    assert seqs == list(range(1, last + 1))
    expect(timeline.locator("h3", has_text="Stage research")).to_have_count(1)
    expect(timeline.locator("h3", has_text="Stage draft")).to_have_count(1)
    expect(page.locator("#run-header")).to_contain_text(f"{last} events")
    # Nothing moves now (the lease given up: a held lease that is not renewed is a worker
    # gone silent, which the decision counts): the polls are answered with nothing.
    leases.release(run.pk, writer.token)
    with page.expect_response(lambda r: "/timeline/" in r.url and r.status == 204):
        pass
    assert timeline.locator("tbody th[scope=row]").count() == last
    assert 200 in polls
    assert not problems, problems

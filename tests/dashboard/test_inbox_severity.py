"""The inbox orders runs that need a human by severity (waiting, blocked, deviated, failed,
interrupted), then by age, keyset-paged on run_inbox_idx; it counts each reason; it says how
many runs are new without moving its rows; its pages are in reach; a run of a pipeline this
process does not know is flagged (issue 24, points 5, 6 and 7)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.models import Run
from runs.planning import stored_plans
from runs.reads import inbox
from tests.support.plans import (
    charge_unknown,
    finished_deviated,
    interrupted_with_plan,
    run_one_stage_in_process,
    stopped_in_process,
)
from tests.support.web import client_as

pytestmark = pytest.mark.django_db

PUBLISH_LIVE = {"timeout": "publish/publish/after"}


@pytest.fixture(autouse=True)
def quick_settings(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.RESUMER_LEASE_TTL = 120


def waiting_at_review() -> Run:
    run = engine.start_run("content", {"review": "on"}, actor="test", enqueue=False)
    return run_inline(run.pk)


@pytest.fixture
def one_of_each(facts) -> dict[str, Run]:
    """Made from the most severe to the least, so the newest is the least severe: an order by
    age alone would be the reverse of the severity order."""
    blocked = charge_unknown()
    made = {"blocked": blocked}
    made["deviated"] = finished_deviated()
    made["failed"] = stopped_in_process(PUBLISH_LIVE)
    made["interrupted"] = interrupted_with_plan()
    made["running"] = run_one_stage_in_process()
    made["waiting"] = waiting_at_review()
    # The blocked charge's plan comes last, as a worker's plan job would store it.
    stored_plans.refresh(blocked)
    return {name: Run.objects.get(pk=run.pk) for name, run in made.items()}


def walk(filters: inbox.InboxFilters, size: int) -> list[int]:
    seen, after = [], None
    while True:
        page = inbox.inbox_page(filters, after, size=size)
        seen += [r.pk for r in page.runs]
        if page.next_after is None:
            return seen
        after = page.next_after


def test_runs_that_need_a_human_come_by_severity_then_age_across_pages(one_of_each):
    names = ["waiting", "blocked", "deviated", "failed", "interrupted", "running"]
    assert [one_of_each[n].severity for n in names] == [
        Run.Severity.WAITING,
        Run.Severity.BLOCKED,
        Run.Severity.DEVIATED,
        Run.Severity.FAILED,
        Run.Severity.INTERRUPTED,
        Run.Severity.NONE,
    ]
    expected = [one_of_each[n].pk for n in names]
    for size in (1, 2, 4, 50):
        assert walk(inbox.InboxFilters(), size) == expected, size


def test_within_a_severity_the_newest_change_comes_first_across_pages(facts):
    made = [interrupted_with_plan() for _ in range(5)]
    blocked = charge_unknown()
    stored_plans.refresh(blocked)
    newest_first = [r.pk for r in sorted(made, key=lambda r: (r.updated_at, r.pk), reverse=True)]
    assert walk(inbox.InboxFilters(), 2) == [blocked.pk, *newest_first]


def test_a_blocked_plan_raises_the_run_and_a_resume_lowers_it(facts):
    run = charge_unknown()
    assert run.severity == Run.Severity.FAILED  # the append path knows only the failure
    stored_plans.refresh(run)
    run.refresh_from_db()
    assert run.severity == Run.Severity.BLOCKED
    other = interrupted_with_plan()
    assert other.severity == Run.Severity.INTERRUPTED
    assert Run.objects.get(pk=other.pk).attention == 0


def counts_of(html: str) -> dict[str, int]:
    found = re.findall(r'<li class="reason-(\w+)[^"]*"><a [^>]*>\w+ <strong>(\d+)</strong>', html)
    return {kind: int(n) for kind, n in found}


def test_each_reason_is_counted_as_its_filter_finds_it(one_of_each):
    viewer = client_as("viewer")
    html = viewer.get("/runs/").content.decode()
    assert counts_of(html) == {
        "waiting": 1,
        "blocked": 1,
        "deviated": 1,
        # The blocked charge failed too; the count is what the link shows.
        "failed": 2,
        "interrupted": 1,
        "drifted": 0,
    }
    assert "5 runs need a human" in html
    for kind, n in counts_of(html).items():
        rows = re.findall(
            r">(run-\d+)</a></th>", viewer.get(f"/runs/?reason={kind}").content.decode()
        )
        assert len(set(rows)) == n, kind


def news(client, since, **filters: str) -> str:
    return client.get("/runs/news/", {"since": since.isoformat(), **filters}).content.decode()


def test_the_notice_counts_runs_that_came_to_need_a_human_since_the_rows_were_read(facts):
    viewer = client_as("viewer")
    page = viewer.get("/runs/").content.decode()
    # The page polls the notice with the moment it read its rows, and the rows stay.
    poll = re.search(r'id="inbox-news"[^>]*hx-get="([^"]+)"[^>]*hx-trigger="every 3s"', page, re.S)
    assert poll, "the inbox polls its notice"
    url = poll.group(1).replace("&amp;", "&")
    assert "since=" in url
    # Nothing new: an empty answer, which leaves the page as it is.
    assert viewer.get(url).status_code == 204

    interrupted_with_plan()
    interrupted_with_plan()
    notice = viewer.get(url).content.decode()
    assert "2 new: runs need a human since this list was read. Show them" in notice
    # It replaces only itself, keeps polling from the same moment, and shows the rows on a click.
    assert 'hx-swap="outerHTML"' in notice and 'hx-trigger="every 3s"' in notice
    assert 'hx-target="#inbox-results"' in notice
    assert "<table" not in notice
    assert url.split("since=")[1].split("&")[0] in notice.replace("&amp;", "&")


def test_the_notice_follows_the_filters_and_shrugs_off_a_bad_time(facts):
    viewer = client_as("viewer")
    before = timezone.now() - timedelta(seconds=1)
    interrupted_with_plan()
    assert "1 new: a run needs a human" in news(viewer, before)
    assert "news-button" not in news(viewer, before, reason="blocked")
    assert "news-button" not in news(viewer, timezone.now() + timedelta(seconds=5))
    garbled = viewer.get("/runs/news/", {"since": "yesterday"})
    assert garbled.status_code == 200
    assert 'hx-trigger="every 3s"' in garbled.content.decode()
    assert Client().get("/runs/news/").status_code == 302


def test_the_pages_are_shown_above_and_below_the_rows(facts):
    viewer = client_as("viewer")
    for _ in range(inbox.INBOX_PAGE_SIZE + 3):
        engine.start_run("content", {}, actor="test", enqueue=False)
    html = viewer.get("/runs/").content.decode()
    assert html.count('rel="next"') == 2
    top, bottom = html.index("pager-top"), html.index("pager-bottom")
    assert top < html.index('<table class="runs"') < bottom
    after = re.search(r'href="\?after=(\d+)" rel="next"', html).group(1)
    second = viewer.get(f"/runs/?after={after}").content.decode()
    assert "Last page" in second and "First page</a>" in second


def test_a_run_of_a_pipeline_this_process_does_not_know_is_flagged(facts):
    viewer = client_as("viewer")
    run = interrupted_with_plan()
    assert "not registered here" not in viewer.get("/runs/").content.decode()
    Run.objects.filter(pk=run.pk).update(pipeline="retired")
    html = viewer.get("/runs/").content.decode()
    assert 'retired <span class="badge flag-unknown"' in html

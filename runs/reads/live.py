"""What a live run page's poll gets: only what moved since the page was drawn.

The run page asks every 2 s while its run moves (5 s while it waits for a human). Sending it
the whole latest page of events each time cost 68–92 KB a poll, most of it events the page
already showed (bench/live_polls.py). Its poll form says what it shows (`Seen`), and the
answer is one of three:

* nothing (`Poll.quiet`, an HTTP 204): no event came, and the decision's state, the lease's
  heartbeat and the worker's silence are as shown; one query on the run;
* the news (`Poll.update` with a `NewsPage`): the events after the page's last one, which
  the page adds under its last table, with the header and whatever else moved;
* the whole timeline again (`Poll.update` with a `TimelinePage`): when the page must be laid
  out again (the run started or stopped moving, or finished; its plan's checkpoint moved,
  which collapses other events), when more than a page of events came, or when the page
  showed none.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import takewhile

from runs.events import read
from runs.models import Event, Run
from runs.reads.decision import silent_for
from runs.reads.run_page import (
    TIMELINE_PAGE_SIZE,
    TimelinePage,
    TimelineUpdate,
    heartbeat,
    page_state,
    table_start,
    timeline_update,
)

FOLLOWS = ("active", "stopped")


@dataclass(frozen=True)
class Seen:
    """What a live page shows, as its poll form sends it back (TimelinePage's fields)."""

    since: int  # the seq of its last event
    state: str  # what its decision was rendered from (run_page.page_state)
    beat: int  # the lease heartbeat its header shows (run_page.heartbeat)
    settled: int  # the seq its collapsed, settled history ends at (0: none)
    tail: int  # the first seq of its last stage table (0: none)
    follows: str  # "active" or "stopped": what its live line says


@dataclass
class NewsPage(TimelinePage):
    """A poll's answer: only the events after the page's last one (`since`). Those of the
    stage the page's last table shows (it starts at `shown_tail`) go under it when `joins`."""

    since: int = 0
    shown_tail: int = 0
    joins: bool = False

    @property
    def continued(self) -> list[Event]:
        if not self.joins:
            return []
        return list(takewhile(lambda e: e.stage == self.events[0].stage, self.events))

    @property
    def rest(self) -> list[Event]:
        """The new events that start tables of their own."""
        return self.events[len(self.continued) :]

    @property
    def until(self) -> int:
        return self.events[-1].seq if self.events else self.since

    @property
    def tail(self) -> int:
        return table_start(self.rest) or self.shown_tail


@dataclass(frozen=True)
class Poll:
    quiet: bool
    update: TimelineUpdate | None = None


def poll_run(pk: int) -> Run | None:
    """The run as a poll reads it: with its lease, and its stored plan's time without the
    plan (all a quiet poll needs, in one query)."""
    return (
        Run.objects.select_related("lease", "parent", "branch_checkpoint", "stored_plan")
        .defer("stored_plan__data", "stored_plan__unsettled")
        .filter(pk=pk)
        .first()
    )


def _quiet(run: Run, seen: Seen) -> bool:
    stored = getattr(run, "stored_plan", None) if run.is_resumable else None
    return (
        seen.since == run.last_seq
        and seen.state == page_state(run, stored)
        and seen.beat == heartbeat(run)
        # A silent worker's decision counts the seconds: it is sent while that lasts.
        and silent_for(run) is None
    )


def poll(run: Run, seen: Seen, *, logs: bool = False) -> Poll:
    """What a live page that shows `seen` is sent (see the module's docstring)."""
    if _quiet(run, seen):
        return Poll(quiet=True)
    follows = "active" if run.is_active else "stopped"

    def news(settled: int, every: str) -> TimelinePage | None:
        laid_out = bool(every) and (settled, follows) == (seen.settled, seen.follows)
        if not laid_out or not 0 < seen.since <= run.last_seq:
            return None
        return news_page(run, seen)

    return Poll(quiet=False, update=timeline_update(run, None, seen.state, logs=logs, news=news))


def news_page(run: Run, seen: Seen, size: int = TIMELINE_PAGE_SIZE) -> NewsPage | None:
    """The events after the page's last one, read with that one (its stage says whether the
    first new rows go under the page's last table); None when more than a page came: the
    page is drawn again rather than grown by thousands of rows."""
    rows = list(
        Event.objects.filter(run=run, seq__gte=seen.since)
        .defer("hash", "prev_hash", "token")
        .order_by("seq")[: size + 2]
    )
    last = rows.pop(0) if rows and rows[0].seq == seen.since else None
    if last is None or len(rows) > size:
        return None
    for event in rows:
        event.shown = read(event)
    joins = bool(rows) and seen.tail > seen.settled and rows[0].stage == last.stage
    return NewsPage(
        run=run,
        events=rows,
        after=None,
        older_after=None,
        newer_after=None,
        since=seen.since,
        shown_tail=seen.tail,
        joins=joins,
    )

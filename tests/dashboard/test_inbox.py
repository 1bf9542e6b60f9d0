"""The inbox says why each run stopped and what is at stake: the sentence of the stopping
event, how long ago, the strict resume's cost beside a fresh retry's and whether the plan is
blocked, all read from the log and the stored plan; filtered by reason kind, keyset-paged,
at a constant number of queries, and never asking a target.

Runs are executed in this process (tests/support/plans.py) and their plans stored the way
the worker's plan job would; the story's interrupted run is the one real worker crash.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from demo import faults
from demo.management.commands.seed_demo import run_inline
from demo.models import SimCall
from demo.simulators import publish_facts
from runs.access import roles
from runs.execution import sweeper
from runs.ledger import edits
from runs.ledger.maintenance import maintenance
from runs.models import ApprovalMode, Effect, Run, StoredPlan
from runs.planning import stored_plans
from runs.planning.resume import approve
from runs.quantities import money
from runs.reads import inbox
from runs.reads.stops import ReasonKind, blocked_sentence
from tests.support.plans import (
    TOPIC,
    effect,
    run_in_process,
    run_one_stage_in_process,
    stopped_in_process,
)

pytestmark = pytest.mark.django_db

PUBLISH_LIVE = {"timeout": "publish/publish/after"}
CHARGE_UNKNOWN = {"timeout": "publish/promote-charge/after"}
COVER_UNKNOWN = {"timeout": "visual/render-cover/after"}


@pytest.fixture(autouse=True)
def quick_settings(settings, request, facts) -> None:
    # `facts`: the demo's fact sheets and its target service, empty and answering.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    if "workers" not in request.fixturenames:
        # Stages run in this test's transaction; a heartbeat on its own connection must not
        # fire during them (on SQLite it would wait on the test's write lock). Workers keep
        # the short lease the sweeper needs to notice a dead one.
        settings.RESUMER_LEASE_TTL = 120


@pytest.fixture
def viewer(db) -> Client:
    user, _ = roles.ensure_user("viewer", "viewer-demo-pass", "viewer")
    client = Client()
    client.force_login(user)
    return client


def interrupted_before_any_call() -> Run:
    """A run whose worker vanished before its first stage started, with its plan."""
    run = faults.start_run("content", {}, actor="test", enqueue=False)
    sweeper.interrupt(sweeper.Finding(run.pk, "test: the worker vanished", {}), takeover=True)
    run.refresh_from_db()
    stored_plans.refresh(run)
    return run


def deviated(options: dict, flip: str) -> Run:
    """A stopped run approved for a strict resume whose ledger row for `flip` was changed
    behind the ledger's back before the resumed work reached it: the engine finds another
    action than the plan's and records PLAN_DEVIATED."""
    run = stopped_in_process(options)
    approve(
        run, ApprovalMode.STRICT, StoredPlan.objects.get(run=run).fingerprint, actor="user:operator"
    )
    with maintenance():  # behind the ledger's back: its triggers lifted
        Effect.objects.filter(run=run, call_id=flip).update(status=Effect.Status.FAILED)
    return run_inline(run.pk)


def row_of(html: str, run: Run) -> str:
    match = re.search(
        rf"<tr[^>]*>\s*<th scope=\"row\"><a [^>]*>{run.public_id}</a>.*?</tr>", html, re.S
    )
    assert match, f"{run.public_id} is not in the inbox"
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(0)).split())


def shown(client: Client, query: str = "") -> set[str]:
    html = client.get(f"/runs/?{query}").content.decode()
    return set(re.findall(r">(run-\d+)</a></th>", html))


def stake(plan: StoredPlan) -> str:
    calls = lambda n: f"{n} call{'s' if n != 1 else ''}"  # noqa: E731
    return (
        f"Resume: {calls(plan.resume_calls)}, {money(plan.resume_money)} "
        f"vs fresh retry: {calls(plan.fresh_calls)}, {money(plan.fresh_money)}"
    )


# --- per reason: the sentence, the cost, the blocked flag --------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_storys_interrupted_run_says_the_worker_was_lost_uploading_the_cover(story_run, viewer):
    plan = StoredPlan.objects.get(run=story_run)

    row = row_of(viewer.get("/runs/").content.decode(), story_run)

    assert "worker lost during upload-cover; the resume retries it with the same key" in row
    assert re.search(r"(\d+\s+\w+|less than a minute) ago", row)
    assert stake(plan) in row
    assert plan.resume_calls < plan.fresh_calls
    assert "Blocked" not in row


def test_a_publish_that_timed_out_while_the_article_went_live_says_the_resume_records_it(viewer):
    run = stopped_in_process(PUBLISH_LIVE)
    plan = StoredPlan.objects.get(run=run)

    row = row_of(viewer.get("/runs/").content.decode(), run)

    assert "publish timed out; the target has it: the resume records it, no second publish" in row
    assert stake(plan) in row
    assert "Blocked" not in row


def test_a_charge_with_an_unknown_outcome_is_blocked_for_a_supervisor(viewer):
    run = stopped_in_process(CHARGE_UNKNOWN)
    plan = StoredPlan.objects.get(run=run)
    assert plan.blocked

    row = row_of(viewer.get("/runs/").content.decode(), run)

    assert "promote-charge timed out: a supervisor must decide" in row
    # What it waits for, not a price: "0 calls, $0.00" would read as free.
    assert "blocked: a supervisor must settle publish/promote-charge before any resume" in row
    assert "Resume:" not in row and "Blocked" in row


def test_a_charge_a_supervisor_resolved_says_the_ledger_has_it_and_unblocks(viewer):
    run = stopped_in_process(CHARGE_UNKNOWN)
    edits.edit_effect(
        effect(run, "promote-charge").pk,
        {"status": Effect.Status.FAILED},
        reason="card processor shows no charge",
        actor="user:supervisor",
    )
    # Before the plan job ran again: the old plan, said to be older than the run.
    row = row_of(viewer.get("/runs/").content.decode(), run)
    assert "Blocked" in row
    assert "the run changed since; a new plan is on its way" in row

    stored_plans.refresh(run)
    row = row_of(viewer.get("/runs/").content.decode(), run)
    assert "promote-charge timed out; its outcome is in the ledger now" in row
    assert "Blocked" not in row
    assert "changed since" not in row


def test_a_stopped_run_whose_plan_is_not_computed_yet_says_no_plan_yet(viewer):
    run = run_in_process(PUBLISH_LIVE)

    row = row_of(viewer.get("/runs/").content.decode(), run)

    assert "publish timed out; the plan asks the target whether it happened" in row
    assert "No plan yet" in row
    assert "Resume:" not in row


def test_a_plan_of_an_earlier_stop_is_not_shown_for_the_next_one(viewer):
    run = stopped_in_process(COVER_UNKNOWN)
    approve(
        run, ApprovalMode.STRICT, StoredPlan.objects.get(run=run).fingerprint, actor="user:operator"
    )
    # The resumed work stops again (its worker vanished while the stage was queued); the
    # stored plan is still the first stop's.
    run.refresh_from_db()
    sweeper.interrupt(sweeper.Finding(run.pk, "test: the worker vanished", {}), takeover=True)

    row = row_of(viewer.get("/runs/").content.decode(), run)

    assert "interrupted: test: the worker vanished" in row
    assert "No plan yet" in row


def test_a_deviated_run_that_went_on_says_how_it_departed_from_its_plan(viewer):
    run = deviated(COVER_UNKNOWN, flip="render-body-1")
    assert (run.status, run.deviated) == (Run.Status.SUCCEEDED, True)

    row = row_of(viewer.get("/runs/").content.decode(), run)

    assert (
        "deviated from its approved plan: render_image (visual/render-body-1): "
        "the plan said reuse, the engine found call"
    ) in row
    assert re.search(r"(\d+\s+\w+|less than a minute) ago", row)


def test_a_deviation_that_stopped_the_run_is_said_once(viewer):
    run = deviated(PUBLISH_LIVE, flip="publish")
    assert (run.status, run.deviated) == (Run.Status.NEEDS_APPROVAL, True)
    stored_plans.refresh(run)

    row = row_of(viewer.get("/runs/").content.decode(), run)

    assert (
        "deviated from its approved plan: publish_article (publish/publish): "
        "the plan said record-found, the engine found call"
    ) in row
    assert "stopped for a decision" not in row
    plan = StoredPlan.objects.get(run=run)
    assert (blocked_sentence(plan.unsettled) if plan.blocked else stake(plan)) in row


def test_runs_that_need_no_human_say_nothing_about_a_stop(viewer):
    running = run_one_stage_in_process()
    row = row_of(viewer.get("/runs/").content.decode(), running)
    assert "ago" not in row
    assert "Resume:" not in row


# --- filters, paging, query count, no target ---------------------------------------------------


@pytest.fixture
def one_of_each_kind(facts) -> dict[str, Run]:
    made = {
        "interrupted": interrupted_before_any_call(),
        "publish live": stopped_in_process(PUBLISH_LIVE),
        "charge unknown": stopped_in_process(CHARGE_UNKNOWN),
        "deviated": deviated(COVER_UNKNOWN, flip="render-body-1"),
    }
    drifting = interrupted_before_any_call()
    publish_facts(TOPIC)  # the facts move on: this run's next plan sees its pin drift
    stored_plans.refresh(drifting)
    made["drifted"] = drifting
    made["running"] = run_one_stage_in_process()
    return made


def test_the_inbox_filters_by_reason_kind(viewer, one_of_each_kind):
    runs = {name: run.public_id for name, run in one_of_each_kind.items()}

    assert shown(viewer, "reason=interrupted") == {runs["interrupted"], runs["drifted"]}
    assert shown(viewer, "reason=failed") == {runs["publish live"], runs["charge unknown"]}
    assert shown(viewer, "reason=blocked") == {runs["charge unknown"]}
    assert shown(viewer, "reason=deviated") == {runs["deviated"]}
    assert shown(viewer, "reason=drifted") == {runs["drifted"]}
    assert shown(viewer, "reason=failed&status=failed") == {
        runs["publish live"],
        runs["charge unknown"],
    }
    assert shown(viewer, "") == set(runs.values())


def test_the_drifted_runs_row_says_its_inputs_drifted(viewer, one_of_each_kind):
    html = viewer.get("/runs/?reason=drifted").content.decode()
    assert "Inputs drifted" in row_of(html, one_of_each_kind["drifted"])


@pytest.mark.parametrize("value", ["bogus", "INTERRUPTED", "<script>"])
def test_an_unknown_reason_is_a_form_error_not_a_500(viewer, facts, value):
    interrupted_before_any_call()
    response = viewer.get("/runs/", {"reason": value})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Why it stopped: Choose why runs stopped: interrupted, failed, blocked" in html
    assert not re.findall(r">(run-\d+)</a></th>", html)


def test_a_reason_filter_pages_by_keyset_and_visits_every_run_once(facts):
    made = [interrupted_before_any_call() for _ in range(5)]
    run_one_stage_in_process()
    expected = list(
        Run.objects.filter(pk__in=[r.pk for r in made])
        .order_by("attention", "severity", "-updated_at", "-id")
        .values_list("pk", flat=True)
    )
    filters = inbox.InboxFilters(reason=ReasonKind.INTERRUPTED)
    seen, after = [], None
    while True:
        page = inbox.inbox_page(filters, after, size=2)
        seen += [r.pk for r in page.runs]
        if page.next_after is None:
            break
        after = page.next_after
    assert seen == expected


def _queries_for(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(path).status_code == 200
    return len(ctx.captured_queries)


def test_every_reason_filter_costs_the_same_queries_however_many_runs_stopped(
    viewer, one_of_each_kind
):
    paths = ["/runs/", *(f"/runs/?reason={kind}" for kind in ReasonKind.values)]
    few = {path: _queries_for(viewer, path) for path in paths}
    for _ in range(2):
        stopped_in_process(CHARGE_UNKNOWN)
        deviated(COVER_UNKNOWN, flip="render-body-1")
    for _ in range(6):
        interrupted_before_any_call()  # pinned to the facts before they moved: drifted

    many = {path: _queries_for(viewer, path) for path in paths}

    # Each filtered page reads a fixed set of things (runs with plans, their stopping events,
    # the needs-a-human count, the groups of plan shapes where the filter can have any, the
    # session and the user), whatever the number of runs.
    assert many == few


def test_reading_the_inbox_never_asks_a_target(viewer, one_of_each_kind, demo_service):
    # The targets: the demo service (its meter counts every request, lookups included) and
    # the in-process search source and model (SimCall).
    asked, searched = demo_service.meter(), SimCall.objects.count()
    for query in ["", *(f"reason={kind}" for kind in ReasonKind.values), "status=failed"]:
        assert viewer.get(f"/runs/?{query}").status_code == 200
        assert viewer.get(f"/runs/?{query}", headers={"HX-Request": "true"}).status_code == 200
    assert (demo_service.meter(), SimCall.objects.count()) == (asked, searched)


def test_how_long_ago_is_said_at_one_unit():
    from datetime import timedelta

    from django.utils import timezone

    from runs.templatetags.runs_extras import ago

    now = timezone.now()
    assert ago(now - timedelta(seconds=20)) == "less than a minute ago"
    # timesince keeps the number and its unit together with a no-break space.
    assert ago(now - timedelta(hours=3, minutes=5)) == "3\xa0hours ago"
    assert ago(now - timedelta(days=2, hours=1)) == "2\xa0days ago"
    assert ago(None) == ""

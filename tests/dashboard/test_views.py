"""The dashboard through Django's test client: access, the inbox, the run page, the plan, and
every kind of bad input an approval can get.

Runs are executed in this process (seed_demo.run_inline drives the stages the way a worker
would), so these tests need neither workers nor Redis.
"""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from demo import faults, simulators
from demo.management.commands.seed_demo import run_inline
from demo_service.process import ServiceClient
from runs.access import roles
from runs.events import ToolResult
from runs.execution import sweeper
from runs.ledger import leases, reasons
from runs.ledger.append import Writer, append
from runs.ledger.edits import edit_effect
from runs.ledger.maintenance import maintenance
from runs.models import Checkpoint, Effect, Event, Run, StoredPlan
from runs.planning import stored_plans
from runs.planning.close_out import close_out
from runs.planning.planner import compute_plan
from runs.reads import artifacts, inbox

pytestmark = pytest.mark.django_db


# --- helpers ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def quick_settings(settings) -> None:
    # The default hasher is slow on purpose; four users per test would cost seconds.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Stages run in this test's transaction; a heartbeat (on its own connection, every
    # TTL/3) must not fire during them, or on SQLite it would wait on the test's write lock.
    settings.RESUMER_LEASE_TTL = 120


@pytest.fixture
def users(db) -> dict[str, User]:
    made = {}
    for role in roles.ROLES:
        made[role], _ = roles.ensure_user(role, f"{role}-demo-pass", role)
    made["nobody"] = User.objects.create_user("nobody", password="nobody-pass-123")
    return made


def client_for(user: User | None, **kwargs) -> Client:
    client = Client(**kwargs)
    if user is not None:
        # force_login: axes wants the request passed to authenticate(), which login() does not.
        client.force_login(user)
    return client


@pytest.fixture
def viewer(users) -> Client:
    return client_for(users["viewer"])


@pytest.fixture
def operator(users) -> Client:
    return client_for(users["operator"])


def started(**options) -> Run:
    return faults.start_run("content", {}, actor="test", faults=options, enqueue=False)


def with_its_plan(run: Run) -> Run:
    """What the worker's plan job does once a run stops (these tests' transactions never
    commit, so the job is never queued): compute the plan and store it for the pages."""
    if run.is_resumable:
        stored_plans.refresh(run)
    return run


def executed(inputs: dict | None = None, **options) -> Run:
    run = faults.start_run("content", inputs or {}, actor="test", faults=options, enqueue=False)
    return with_its_plan(run_inline(run.pk))


def interrupted() -> Run:
    """A run whose worker vanished before it started: interrupted at its first stage."""
    run = started()
    sweeper.interrupt(sweeper.Finding(run.pk, "test: the worker vanished", {}), takeover=True)
    run.refresh_from_db()
    return with_its_plan(run)


def approvals(run: Run) -> int:
    return Event.objects.filter(run=run, type=Event.Type.PLAN_APPROVED).count()


def url(run: Run, suffix: str = "") -> str:
    return f"/runs/{run.public_id}/{suffix}"


# --- access ----------------------------------------------------------------------------------


def test_anonymous_is_sent_to_login(facts):
    run = started()
    for path in ("/runs/", url(run), url(run, "plan/"), url(run, "timeline/")):
        response = Client().get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


def test_a_poll_after_the_session_ended_sends_the_page_to_login(facts):
    run = started()
    response = Client().get(
        url(run, "timeline/"),
        headers={"HX-Request": "true", "HX-Current-URL": f"http://testserver{url(run)}"},
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"/login/?next=/runs/{run.public_id}/"
    assert not response.content


def test_a_user_without_a_role_reads_nothing(users, facts):
    run = started()
    client = client_for(users["nobody"])
    for path in ("/runs/", url(run), url(run, "plan/")):
        assert client.get(path).status_code == 403


def test_login_page_logs_in_through_axes(users):
    client = Client()
    page = client.get("/login/")
    assert page.status_code == 200
    assert b'name="username"' in page.content
    response = client.post("/login/", {"username": "operator", "password": "operator-demo-pass"})
    assert response.status_code == 302
    assert response["Location"] == "/runs/"
    assert client.get("/runs/").status_code == 200


def test_login_is_throttled_after_repeated_failures(users, settings):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post("/login/", {"username": "operator", "password": "wrong"})
    locked = client.post("/login/", {"username": "operator", "password": "operator-demo-pass"})
    assert locked.status_code == 429
    assert b"Too many failed log-in attempts" in locked.content


def test_pages_carry_the_content_security_policy(viewer, facts):
    response = viewer.get("/runs/")
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp
    assert "unsafe-inline" not in csp
    # No inline script or style anywhere in our pages.
    run = executed()
    for path in ("/runs/", url(run), url(run, "plan/"), "/login/"):
        html = viewer.get(path).content.decode()
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), path
        assert "<style" not in html and " style=" not in html, path


# --- inbox -----------------------------------------------------------------------------------


def test_inbox_lists_runs_needing_a_human_first(viewer, facts):
    done = executed()
    failed = executed(timeout="visual/render-cover/after")
    pending = started()
    response = viewer.get("/runs/")
    assert response.status_code == 200
    html = response.content.decode()
    order = [html.index(f">{r.public_id}<") for r in (failed, pending, done)]
    assert order == sorted(order)
    assert "1 run needs a human" in html


def test_inbox_filters_and_search(viewer, facts):
    done = executed()
    failed = executed(timeout="visual/render-cover/after")
    pending = started()

    def shown(query: str) -> set[str]:
        html = viewer.get(f"/runs/?{query}").content.decode()
        return set(re.findall(r">(run-\d+)</a></th>", html))

    assert shown("status=failed") == {failed.public_id}
    assert shown("status=succeeded") == {done.public_id}
    assert shown("stage=research") == {pending.public_id}
    assert shown("pipeline=content") == {done.public_id, failed.public_id, pending.public_id}
    assert shown(f"q={failed.public_id}") == {failed.public_id}
    assert shown(f"q={failed.pk}") == {failed.public_id}
    assert shown("q=run-999999") == set()
    bad = viewer.get("/runs/?q=run-abc")
    assert bad.status_code == 200
    assert b"Search by run id" in bad.content
    assert viewer.get("/runs/?status=bogus").status_code == 200


def test_inbox_htmx_request_gets_only_the_results(viewer, facts):
    started()
    response = viewer.get("/runs/?status=pending", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert 'id="inbox-results"' in html
    assert "<html" not in html
    assert "HX-Request" in response["Vary"]


def test_inbox_keyset_paging_visits_every_run_once(facts):
    made = [started() for _ in range(7)]
    made += [interrupted() for _ in range(3)]
    expected = list(
        Run.objects.order_by("attention", "severity", "-updated_at", "-id").values_list(
            "pk", flat=True
        )
    )
    for filters in (inbox.InboxFilters(), inbox.InboxFilters(status=Run.Status.PENDING)):
        seen, after = [], None
        while True:
            page = inbox.inbox_page(filters, after, size=3)
            seen += [r.pk for r in page.runs]
            if page.next_after is None:
                break
            after = page.next_after
        wanted = [pk for pk in expected if not filters.status or pk in {r.pk for r in made[:7]}]
        assert seen == wanted


def test_inbox_next_page_link_uses_the_keyset_cursor(viewer, facts):
    for _ in range(inbox.INBOX_PAGE_SIZE + 2):
        started()
    first = viewer.get("/runs/").content.decode()
    match = re.search(r'href="\?after=(\d+)" rel="next"', first)
    assert match, "a next page link"
    second = viewer.get(f"/runs/?after={match.group(1)}").content.decode()
    first_ids = set(re.findall(r">(run-\d+)</a></th>", first))
    second_ids = set(re.findall(r">(run-\d+)</a></th>", second))
    assert len(first_ids) == inbox.INBOX_PAGE_SIZE
    assert len(second_ids) == 2
    assert not first_ids & second_ids
    assert 'rel="next"' not in second


def _queries_for(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(path).status_code == 200
    return len(ctx.captured_queries)


def test_inbox_query_count_does_not_grow_with_runs(viewer, facts, django_assert_max_num_queries):
    for _ in range(3):
        started()
    few = _queries_for(viewer, "/runs/")
    for _ in range(120):
        started()
    many = _queries_for(viewer, "/runs/")
    assert many == few
    with django_assert_max_num_queries(few):
        viewer.get("/runs/?pipeline=content&status=pending")


def _add_events(run: Run, count: int) -> None:
    """Many events at once, for size tests (their hash chain is not the point here)."""
    start = run.last_seq
    Event.objects.bulk_create(
        Event(
            run=run,
            seq=start + i,
            stage="research",
            type=Event.Type.TOOL_RESULT,
            payload={"call": "search", "tool": "search", "result": {"n": i}, "duration_ms": 3},
            actor="test",
            hash=f"{i:064d}",
        )
        for i in range(1, count + 1)
    )
    Run.objects.filter(pk=run.pk).update(last_seq=start + count)


def test_run_page_query_count_does_not_grow_with_events(
    viewer, facts, django_assert_max_num_queries
):
    small, large = started(), started()
    _add_events(small, 5)
    _add_events(large, 1500)
    few = _queries_for(viewer, url(small))
    many = _queries_for(viewer, url(large))
    assert many == few
    with django_assert_max_num_queries(few):
        viewer.get(url(large, "timeline/"))
    page = viewer.get(url(large)).content.decode()
    # The latest page: the last TIMELINE_PAGE_SIZE events, and a link to older ones.
    assert f'of <span id="timeline-total">{large.last_seq + 1500}</span>' in page
    assert "Older events" in page


def test_run_page_of_a_finished_run_has_constant_queries(viewer, facts):
    one, two = executed(), executed()
    _add_events(two, 300)
    assert _queries_for(viewer, url(one)) == _queries_for(viewer, url(two))


# --- run page --------------------------------------------------------------------------------


def test_run_page_shows_header_timeline_checkpoints_artifacts_effects(viewer, facts):
    run = executed()
    html = viewer.get(url(run)).content.decode()
    assert 'id="run-status"' in html and "Succeeded" in html
    assert "5 of 5 stages verified" in html
    for stage in ("research", "draft", "visual", "prefill", "publish"):
        assert f"Stage {stage}" in html
        assert f"{run.public_id}:{stage}-verified" in html
    assert "image.count == 3" in html
    assert "publish_article" in html and "charge_card" in html
    assert "Lease holder" in html and "Last heartbeat" in html
    # Thumbnails through the artifact view; a finished run does not poll.
    assert re.search(r'<img class="thumb" src="/runs/artifacts/\d+/raw/"', html)
    assert "hx-trigger" not in html
    assert "Reconcile plan" not in html  # nothing to resume


def test_run_page_shows_lineage_both_ways(operator, facts):
    simulators.ensure_topic("lineage-topic")
    parent = executed({"topic": "lineage-topic"}, timeout="publish/publish/after")
    simulators.publish_facts("lineage-topic")
    plan = compute_plan(parent)
    response = operator.post(
        url(parent, "approve/"),
        {"action": "upgrade", "fingerprint": plan.fingerprint, "confirm": "on"},
    )
    branch = Run.objects.get(parent=parent)
    assert response.status_code == 302
    assert response["Location"] == url(branch)
    parent_page = operator.get(url(parent)).content.decode()
    assert f'href="/runs/{branch.public_id}/"' in parent_page
    assert "Superseded" in parent_page
    branch_page = operator.get(url(branch)).content.decode()
    assert f'href="/runs/{parent.public_id}/"' in branch_page


def test_active_run_timeline_polls_and_stops_when_done(viewer, facts):
    run = started()
    page = viewer.get(url(run)).content.decode()
    assert f'hx-get="/runs/{run.public_id}/timeline/"' in page
    assert 'hx-trigger="every 2s"' in page
    partial = viewer.get(url(run, "timeline/")).content.decode()
    assert 'hx-trigger="every 2s"' in partial
    # The header travels with it, out of band, so the status updates too.
    assert 'id="run-header" class="run-header" hx-swap-oob="true"' in partial
    assert "<html" not in partial
    assert 'id="run-facts"' not in partial  # facts only once the run stops

    run_inline(run.pk)
    partial = viewer.get(url(run, "timeline/")).content.decode()
    assert "hx-trigger" not in partial
    assert "Succeeded" in partial
    # The last poll brings the run's checkpoints, artifacts and effects along.
    assert '<div id="run-facts" hx-swap-oob="true">' in partial
    assert f"{run.public_id}:publish-verified" in partial


def test_timeline_pages_by_seq(viewer, facts):
    run = executed()
    page = viewer.get(url(run) + "?after=10").content.decode()
    seqs = [int(s) for s in re.findall(r'<th scope="row" class="num">(\d+)</th>', page)]
    assert seqs[0] == 11
    assert seqs == list(range(11, run.last_seq + 1))
    # A garbled ?after= falls back to the latest page instead of failing.
    for garbled in ("abc", "-5", "²", "9" * 40):
        assert viewer.get(url(run) + f"?after={garbled}").status_code == 200


# --- the decision, kept in view on the run page ----------------------------------------------


def decision(html: str) -> str:
    """The run page's sticky summary: status, verdict, cost and the operator's actions."""
    match = re.search(r'<aside id="decision".*?</aside>', html, flags=re.S)
    assert match, "no decision summary on the page"
    return match.group(0)


def test_decision_summary_shows_status_verdict_cost_and_actions(operator, facts):
    run = executed(timeout="visual/render-cover/after")
    plan = compute_plan(run)
    html = operator.get(url(run)).content.decode()
    box = decision(html)
    assert "Failed" in box and "stage <strong>visual</strong>" in box
    assert "Resumable at <strong>visual</strong>" in box
    assert f"from <code>{plan.checkpoint}</code>" in box
    resume, fresh = plan.cost_resume, plan.cost_fresh
    assert f"{resume.tool_calls} calls, ${resume.money}" in box
    assert f"fresh retry: {fresh.tool_calls} calls, ${fresh.money}" in box
    # The same approval the plan panel posts: action, fingerprint, confirmation.
    assert f'action="{url(run, "approve/")}"' in box
    assert f'name="fingerprint" value="{plan.fingerprint}"' in box
    assert 'name="confirm" value="on" required' in box
    assert 'name="action" value="strict" class="primary">Strict resume</button>' in box
    # Upgrade is offered only when an input drifted: disabled, with the reason.
    assert re.search(r'<button type="button" disabled[^>]*>Upgrade</button>', box)
    assert re.search(r"Upgrade:\s+no input has changed", box)
    # It comes before everything else on the page, and every section has an anchor.
    assert html.index('id="decision"') < html.index('id="run-header"')
    for section in ("plan", "timeline", "checkpoints", "artifacts", "effects", "lineage"):
        assert f'id="{section}"' in html and f'href="#{section}"' in html


def test_strict_resume_from_the_decision_summary(operator, facts):
    run = executed(timeout="visual/render-cover/after")
    box = decision(operator.get(url(run)).content.decode())
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', box))
    response = operator.post(url(run, "approve/"), {**fields, "action": "strict", "confirm": "on"})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == Run.Status.RESUMING
    approved = Event.objects.get(run=run, type=Event.Type.PLAN_APPROVED)
    assert approved.payload["action"] == "strict"
    assert approved.payload["fingerprint"] == fields["fingerprint"]


def test_decision_summary_of_a_blocked_plan_offers_no_approval(operator, facts):
    run = executed(timeout="publish/promote-charge/after")
    box = decision(operator.get(url(run)).content.decode())
    assert "Blocked: a supervisor decides first" in box
    assert re.search(r'<button type="button" disabled[^>]*>Strict resume</button>', box)
    assert "blocked until a supervisor settles it on its effect page" in box
    # No approval; the one form is the way out that is always there: closing the run out.
    assert re.findall(r'<form method="post" action="([^"]+)"', box) == [url(run, "close/")]
    assert 'name="fingerprint"' not in box


def test_viewer_sees_the_decision_summary_without_actions(viewer, facts):
    run = executed(timeout="visual/render-cover/after")
    box = decision(viewer.get(url(run)).content.decode())
    assert "Resumable at <strong>visual</strong>" in box
    assert "<button" not in box and "<form" not in box


def test_decision_summary_of_an_active_run_follows_the_poll(viewer, facts):
    run = started()
    assert "Nothing to decide while the run is active" in decision(
        viewer.get(url(run)).content.decode()
    )
    partial = viewer.get(url(run, "timeline/")).content.decode()
    assert (
        '<aside id="decision" class="decision" aria-label="Decision" hx-swap-oob="true">' in partial
    )
    run_inline(run.pk)
    assert "Succeeded" in decision(viewer.get(url(run, "timeline/")).content.decode())


def test_history_before_the_resume_checkpoint_is_collapsed(viewer, facts):
    run = executed(timeout="visual/render-cover/after")
    plan = compute_plan(run)
    sealed = Checkpoint.objects.get(pk=plan.checkpoint).last_seq
    html = viewer.get(url(run)).content.decode()
    assert f"{sealed} verified events before <code>{plan.checkpoint}</code>" in html
    # Collapsed (no `open`), holding exactly the events up to the checkpoint; the rest after.
    assert '<details class="settled-history" open' not in html
    start = html.index('<details class="settled-history">')
    rest = html.index("After the checkpoint")
    inside = [
        int(s) for s in re.findall(r'<th scope="row" class="num">(\d+)</th>', html[start:rest])
    ]
    after = [int(s) for s in re.findall(r'<th scope="row" class="num">(\d+)</th>', html[rest:])]
    assert inside == list(range(1, sealed + 1))
    assert after == list(range(sealed + 1, run.last_seq + 1))


def test_history_is_not_collapsed_without_a_plan(viewer, facts):
    run = executed()
    assert "settled-history" not in viewer.get(url(run)).content.decode()


@pytest.mark.parametrize(
    "path",
    [
        "/runs/run-abc/",
        "/runs/run-999999/",
        "/runs/run-99999999999999999999999/",
        "/runs/run-999999/plan/",
        "/runs/run-/",
        "/runs/42/",
        "/runs/artifacts/999999/",
        "/runs/artifacts/abc/",
        "/runs/artifacts/99999999999999999999999/raw/",
    ],
)
def test_missing_or_garbled_ids_are_a_404_page(viewer, path):
    response = viewer.get(path)
    assert response.status_code == 404
    assert b"Not found" in response.content


def test_approve_of_a_missing_run_is_404(operator):
    assert operator.post("/runs/run-999999/approve/", {}).status_code == 404


# --- ledger edits on the timeline ------------------------------------------------------------

CHECKED = "checked with the card processor: no charge was made."


def _edit_row(client: Client, run: Run) -> str:
    html = client.get(url(run)).content.decode()
    [row] = re.findall(r'<tr class="event event-ledger_edited">.*?</tr>', html, re.S)
    return row


def _edit_charge(run: Run, error: str, reason: str = CHECKED) -> Event:
    effect = Effect.objects.get(run=run, call_id="promote-charge")
    changes = {"status": "failed", "error": error}
    edit_effect(effect.pk, changes, reason=reason, actor="user:supervisor")
    return Event.objects.get(run=run, type=Event.Type.LEDGER_EDITED)


def _assert_shows_who_what_and_why(row: str) -> None:
    assert "user:supervisor" in row
    assert "promote-charge" in row and "charge_card" in row
    assert "status: unknown → failed" in row
    assert CHECKED in row


@pytest.mark.parametrize("error_chars", [20, 20_000], ids=["inline", "stored"])
def test_a_ledger_edit_shows_who_what_and_why_on_the_timeline(viewer, facts, error_chars):
    run = executed(timeout="publish/promote-charge/after")
    event = _edit_charge(run, "e" * error_chars, CHECKED + " " + "x" * 1900)
    assert bool(event.payload_ref) == (error_chars > 20)
    _assert_shows_who_what_and_why(_edit_row(viewer, run))


def test_an_old_ledger_edit_stored_without_a_summary_still_shows_who_what_and_why(
    viewer, facts, monkeypatch
):
    run = executed(timeout="publish/promote-charge/after")
    # Before reasons were bounded and stored payloads kept a summary: a million-character
    # reason, and an event that holds only the artifact's reference.
    monkeypatch.setattr(reasons, "MAX_REASON_CHARS", 10_000_000)
    event = _edit_charge(run, "", CHECKED + " " + "x" * 1_000_000)
    old_body = {"stored_as": event.payload_ref, "bytes": event.payload["bytes"]}
    column = Event._meta.get_field("payload").get_db_prep_save(old_body, connection)
    with maintenance(), connection.cursor() as cursor:
        cursor.execute("UPDATE runs_event SET payload = %s WHERE id = %s", [column, event.pk])
    row = _edit_row(viewer, run)
    _assert_shows_who_what_and_why(row)
    assert "x" * 1000 not in row


# --- artifacts -------------------------------------------------------------------------------


def test_artifacts_are_served_safely(viewer, facts):
    run = executed()
    svg = next(
        a for a in artifacts.artifact_rows(list(run.checkpoints.all())) if a.name == "image-cover"
    )
    response = viewer.get(f"/runs/artifacts/{svg.artifact.pk}/raw/")
    assert response["Content-Type"] == "image/svg+xml"
    assert response["Content-Security-Policy"].startswith("sandbox")
    assert response["X-Content-Type-Options"] == "nosniff"
    draft = next(
        a for a in artifacts.artifact_rows(list(run.checkpoints.all())) if a.name == "draft"
    )
    raw = viewer.get(f"/runs/artifacts/{draft.artifact.pk}/raw/")
    assert raw["Content-Type"] == "text/plain; charset=utf-8"
    page = viewer.get(f"/runs/artifacts/{draft.artifact.pk}/").content.decode()
    assert "yes: the blob exists" in page
    assert "Resumable agents" in page


# --- caching ---------------------------------------------------------------------------------


def _draft(run: Run):
    rows = artifacts.artifact_rows(list(run.checkpoints.all()))
    return next(row.artifact for row in rows if row.name == "draft")


def _dashboard_requests(run: Run) -> dict[str, tuple[str, str, dict, dict]]:
    """One request per kind of dashboard response: (method, path, data, headers)."""
    draft = _draft(run)
    fingerprint = compute_plan(run).fingerprint
    return {
        "inbox": ("get", "/runs/", {}, {}),
        "inbox rows": ("get", "/runs/", {}, {"HX-Request": "true"}),
        "run": ("get", url(run), {}, {}),
        "timeline": ("get", url(run, "timeline/"), {}, {}),
        "plan": ("get", url(run, "plan/"), {}, {}),
        "refused approval": ("post", url(run, "approve/"), {"action": "strict"}, {}),
        "approval": (
            "post",
            url(run, "approve/"),
            {"action": "strict", "fingerprint": fingerprint, "confirm": "on"},
            {},
        ),
        "artifact": ("get", f"/runs/artifacts/{draft.pk}/", {}, {}),
        "raw artifact": ("get", f"/runs/artifacts/{draft.pk}/raw/", {}, {}),
    }


DASHBOARD_KINDS = [
    "inbox",
    "inbox rows",
    "run",
    "timeline",
    "plan",
    "refused approval",
    "approval",
    "artifact",
    "raw artifact",
]


@pytest.mark.parametrize("kind", DASHBOARD_KINDS)
def test_dashboard_responses_are_private_and_never_stored(operator, facts, kind):
    run = executed(timeout="visual/render-cover/after")
    method, path, data, headers = _dashboard_requests(run)[kind]
    response = getattr(operator, method)(path, data, headers=headers)
    assert response.status_code in (200, 302, 400)
    directives = {d.strip() for d in response["Cache-Control"].split(",")}
    assert {"private", "no-store"} <= directives


@pytest.mark.parametrize("role", [None, "nobody", roles.VIEWER])
def test_no_dashboard_response_is_a_500_for_anonymous_viewers_or_no_role(users, facts, role):
    run = executed(timeout="visual/render-cover/after")
    client = client_for(users[role] if role else None)
    allowed = {None: {302}, "nobody": {403}, roles.VIEWER: {200, 403}}[role]
    for kind, (method, path, data, headers) in _dashboard_requests(run).items():
        response = getattr(client, method)(path, data, headers=headers)
        if role is None and "HX-Redirect" in response:
            continue  # an htmx request is sent to the login page through its header
        assert response.status_code in allowed, kind
    assert approvals(run) == 0


# --- untrusted content -----------------------------------------------------------------------

EVIL = '<script>alert(\'x\')</script><button hx-post="/runs/run-1/approve/" hx-trigger="load">go</button>'


def test_agent_output_is_rendered_as_text(viewer, facts):
    topic = "<b>t</b><script>alert(1)</script>"
    simulators.ensure_topic(topic)
    run = executed({"topic": topic}, timeout="visual/render-cover/after")
    token = leases.acquire(run.pk, "test", takeover=True)
    writer = Writer(run.pk, token, "test")
    append(
        writer,
        ToolResult(
            stage="visual",
            idempotency_key="k" * 10,
            call=EVIL,
            tool=EVIL,
            result=EVIL,
            error=EVIL,
            status=EVIL,
        ),
    )
    leases.release(run.pk, token)
    for path in (url(run), url(run, "plan/"), url(run, "timeline/")):
        html = viewer.get(path).content.decode()
        assert "<script>alert" not in html, path
        assert "<b>t</b>" not in html, path
        assert 'hx-post="/runs/run-1' not in html, path
        assert 'hx-trigger="load"' not in html, path
    html = viewer.get(url(run)).content.decode()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    draft = next(
        a for a in artifacts.artifact_rows(list(run.checkpoints.all())) if a.name == "draft"
    )
    page = viewer.get(f"/runs/artifacts/{draft.artifact.pk}/").content.decode()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page


# --- the plan and its two approvals ------------------------------------------------------------


def test_plan_page_explains_the_plan(operator, facts):
    run = executed(timeout="visual/render-cover/after")
    plan = compute_plan(run)
    html = operator.get(url(run, "plan/")).content.decode()
    assert re.search(rf"from checkpoint\s+<code>{plan.checkpoint}</code>", html)
    assert "Reuse the recorded result (no call)" in html
    assert "Call again with the same key" in html
    assert "A fresh retry from step one (not offered)" in html
    assert f'value="{plan.fingerprint}"' in html
    assert html.count("I have read the plan") == 1  # strict only: no drift, no upgrade
    assert "Not available: no input has changed" in html
    assert ">Strict resume</button>" in html
    assert re.search(
        r"<button type=\"button\" disabled[^>]*>Upgrade inputs into a new branch", html
    )


def test_viewer_sees_the_plan_but_no_approve_control(viewer, facts):
    run = executed(timeout="visual/render-cover/after")
    for path in (url(run), url(run, "plan/")):
        html = viewer.get(path).content.decode()
        assert "Reconcile plan" in html
        assert "Strict resume</button>" not in html
        assert "Upgrade inputs into a new branch</button>" not in html
        assert 'name="fingerprint"' not in html
        assert "needs the operator role" in html


def test_get_to_the_approve_url_is_405(operator, facts):
    run = executed(timeout="visual/render-cover/after")
    assert operator.get(url(run, "approve/")).status_code == 405
    assert Client().get(url(run, "approve/")).status_code == 405


def test_viewer_forged_approval_is_403_and_changes_nothing(viewer, facts):
    run = executed(timeout="visual/render-cover/after")
    plan = compute_plan(run)
    response = viewer.post(
        url(run, "approve/"), {"action": "strict", "fingerprint": plan.fingerprint, "confirm": "on"}
    )
    assert response.status_code == 403
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert approvals(run) == 0
    assert compute_plan(run).fingerprint == plan.fingerprint


def test_approval_without_csrf_token_is_403(users, facts):
    run = executed(timeout="visual/render-cover/after")
    plan = compute_plan(run)
    client = client_for(users["operator"], enforce_csrf_checks=True)
    response = client.post(
        url(run, "approve/"), {"action": "strict", "fingerprint": plan.fingerprint, "confirm": "on"}
    )
    assert response.status_code == 403
    assert b"could not be verified" in response.content
    assert approvals(run) == 0


def test_approval_with_the_csrf_token_from_the_page_works(users, facts):
    run = executed(timeout="visual/render-cover/after")
    client = client_for(users["operator"], enforce_csrf_checks=True)
    html = client.get(url(run, "plan/")).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
    # The same token is what htmx sends in its header.
    assert f'"X-CSRFToken": "{token}"' in html
    fingerprint = re.search(r'name="fingerprint" value="([0-9a-f]{64})"', html).group(1)
    response = client.post(
        url(run, "approve/"),
        {
            "action": "strict",
            "fingerprint": fingerprint,
            "confirm": "on",
            "csrfmiddlewaretoken": token,
        },
    )
    assert response.status_code == 302
    assert approvals(run) == 1


def test_strict_resume_through_the_dashboard(operator, facts):
    run = executed(timeout="visual/render-cover/after")
    plan = compute_plan(run)
    response = operator.post(
        url(run, "approve/"), {"action": "strict", "fingerprint": plan.fingerprint, "confirm": "on"}
    )
    assert response.status_code == 302
    assert response["Location"] == url(run)
    run.refresh_from_db()
    assert run.status == Run.Status.RESUMING
    approved = Event.objects.get(run=run, type=Event.Type.PLAN_APPROVED)
    assert approved.payload["by"] == "user:operator"
    page = operator.get(url(run)).content.decode()
    assert "is resuming with its pinned inputs" in page
    assert 'hx-trigger="every 2s"' in page
    # Executed by a worker, it finishes; the header shows it.
    run_inline(run.pk)
    assert "Succeeded" in operator.get(url(run, "timeline/")).content.decode()


def test_approval_needs_the_confirmation_tick(operator, facts):
    run = executed(timeout="visual/render-cover/after")
    plan = compute_plan(run)
    response = operator.post(
        url(run, "approve/"), {"action": "strict", "fingerprint": plan.fingerprint}
    )
    assert response.status_code == 400
    assert "Tick “I have read the plan” to confirm." in response.content.decode()
    assert approvals(run) == 0


@pytest.mark.parametrize(
    "data",
    [
        {"action": "retry", "fingerprint": "a" * 64, "confirm": "on"},
        {"action": "strict", "fingerprint": "not-hex", "confirm": "on"},
        {"action": "strict", "confirm": "on"},
        {},
    ],
)
def test_malformed_approvals_are_400_and_change_nothing(operator, facts, data):
    run = executed(timeout="visual/render-cover/after")
    response = operator.post(url(run, "approve/"), data)
    assert response.status_code == 400
    assert approvals(run) == 0
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED


def test_a_stored_plan_without_drift_says_so_of_the_moment_it_was_computed(operator, facts):
    run = executed(timeout="visual/render-cover/after")

    html = operator.get(url(run, "plan/")).content.decode()

    assert "No input drift when the plan was computed: every pinned input was current then" in html
    assert "still current" not in html


def test_stale_plan_is_refused_with_the_fresh_plan(operator, facts):
    run = executed(timeout="visual/render-cover/after")
    old = compute_plan(run)
    # Something happens after the operator read the plan: a supervisor edits the ledger.
    effect = Effect.objects.get(run=run, call_id="render-cover")
    edit_effect(
        effect.pk,
        {"status": "failed", "error": "checked: not rendered"},
        reason="checked",
        actor="t",
    )
    fresh = compute_plan(run)
    assert fresh.fingerprint != old.fingerprint
    response = operator.post(
        url(run, "approve/"), {"action": "strict", "fingerprint": old.fingerprint, "confirm": "on"}
    )
    assert response.status_code == 409
    html = response.content.decode()
    assert "Not approved: nothing was resumed." in html
    assert f'value="{fresh.fingerprint}"' in html
    assert approvals(run) == 0


def test_blocked_plan_cannot_be_approved(operator, facts):
    run = executed(timeout="publish/promote-charge/after")
    plan = compute_plan(run)
    assert plan.blocked
    html = operator.get(url(run, "plan/")).content.decode()
    assert "Blocked: a human decides first" in html
    assert re.search(r'<button type="button" disabled[^>]*>Strict resume</button>', html)
    assert 'name="fingerprint"' not in html
    response = operator.post(
        url(run, "approve/"), {"action": "strict", "fingerprint": plan.fingerprint, "confirm": "on"}
    )
    assert response.status_code == 409
    assert b"the plan is blocked" in response.content
    assert approvals(run) == 0


def test_upgrade_when_no_input_drifted_is_refused(operator, facts):
    run = executed(timeout="visual/render-cover/after")
    plan = compute_plan(run)
    response = operator.post(
        url(run, "approve/"),
        {"action": "upgrade", "fingerprint": plan.fingerprint, "confirm": "on"},
    )
    assert response.status_code == 409
    assert b"no upgrade is possible" in response.content
    assert not Run.objects.filter(parent=run).exists()


def test_approving_a_finished_run_is_refused(operator, facts):
    run = executed()
    plan = compute_plan(run)
    response = operator.post(
        url(run, "approve/"), {"action": "strict", "fingerprint": plan.fingerprint, "confirm": "on"}
    )
    assert response.status_code == 409
    assert approvals(run) == 0


def test_approving_a_run_closed_since_its_plan_was_read_says_only_why(operator, facts):
    run = executed(timeout="visual/render-cover/after")
    plan = compute_plan(run)
    close_out(run.pk, "not worth it", actor="user:supervisor")

    response = operator.post(
        url(run, "approve/"), {"action": "strict", "fingerprint": plan.fingerprint, "confirm": "on"}
    )

    html = response.content.decode()
    assert response.status_code == 409
    assert "Not approved: nothing was resumed." in html
    assert "approve again" not in html
    assert approvals(run) == 0


def test_double_submit_resumes_once(operator, facts):
    run = interrupted()
    plan = compute_plan(run)
    data = {"action": "strict", "fingerprint": plan.fingerprint, "confirm": "on"}
    first = operator.post(url(run, "approve/"), data)
    second = operator.post(url(run, "approve/"), data)
    assert first.status_code == 302 and second.status_code == 302
    assert approvals(run) == 1
    assert Event.objects.filter(run=run, type=Event.Type.RESUMED).count() == 1
    page = operator.get(second["Location"]).content.decode()
    assert "This plan was already approved; nothing more was done." in page


def test_no_control_reruns_a_run_from_the_start(operator, facts):
    run = executed(timeout="visual/render-cover/after")
    for path in ("/runs/", url(run), url(run, "plan/")):
        html = operator.get(path).content.decode().lower()
        assert ">retry<" not in html and "restart" not in html and "run again from" not in html
        # The only state-changing forms on our pages: approve, close out (and log out).
        actions = set(re.findall(r'<form method="post" action="([^"]+)"', html))
        assert actions <= {url(run, "approve/"), url(run, "plan/check/"), url(run, "close/"), "/logout/"}  # fmt: skip


def test_plan_of_a_long_run_reads_only_the_end_of_its_log(operator, facts):
    """A resumable run with no checkpoint and a long log: the plan page counts the tail and
    reads its last events; it never loads the whole log (a million events in production)."""
    run = interrupted()
    _add_events(run, 2000)
    with CaptureQueriesContext(connection) as ctx:
        stored_plans.refresh(run)  # what "Check targets again" and the plan job do
    # Read before the next request: a request resets the connection's query log.
    reads = [
        q["sql"]
        for q in ctx.captured_queries
        if 'FROM "runs_event"' in q["sql"] and "COUNT(" not in q["sql"]
    ]
    assert reads and all("LIMIT" in sql for sql in reads), reads
    html = operator.get(url(run, "plan/")).content.decode()
    assert f"{2000 + 2}" in html  # events after the (missing) checkpoint


def test_logout_is_a_post(users):
    client = client_for(users["viewer"])
    assert client.get("/logout/").status_code == 405
    response = client.post("/logout/")
    assert response.status_code == 302
    assert client.get("/runs/").status_code == 302


def test_deploy_check_reports_nothing(tmp_path):
    """Production settings pass `manage.py check --deploy` (with a real-sized SECRET_KEY: a
    short one is reported by Django's W009, as it should be)."""
    import os
    import secrets
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "RESUMER_ENV": "production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "example.com",
        "RESUMER_VAR_DIR": str(tmp_path),
    }
    env.pop("DEBUG", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout, result.stdout + result.stderr


# --- the stored plan ---------------------------------------------------------------------------


def platform_queries() -> int:
    """Reconcile lookups the platform answered (found or not)."""
    return ServiceClient(settings.DEMO_SERVICE_URL).count("publish.lookup", outcome=None)


def test_reading_a_plan_never_asks_a_target(viewer, operator, facts):
    # The publish outcome is unknown: computing its plan asks the platform.
    run = executed(timeout="publish/publish/after")
    asked = platform_queries()
    for path in (url(run), url(run, "plan/"), url(run, "timeline/")):
        assert viewer.get(path).status_code == 200
        assert operator.get(path).status_code == 200
    assert platform_queries() == asked


def test_check_targets_again_asks_them_and_stores_the_fresh_plan(operator, facts):
    run = executed(timeout="publish/publish/after")
    asked = platform_queries()
    before = StoredPlan.objects.get(run=run).computed_at

    response = operator.post(url(run, "plan/check/"))

    assert response.status_code == 302
    assert platform_queries() == asked + 1
    stored = StoredPlan.objects.get(run=run)
    assert stored.computed_at >= before
    assert stored.fingerprint == compute_plan(run).fingerprint


def test_a_viewer_cannot_make_the_targets_be_asked(viewer, facts):
    run = executed(timeout="publish/publish/after")
    asked = platform_queries()
    assert viewer.post(url(run, "plan/check/")).status_code == 403
    assert platform_queries() == asked


def test_a_run_without_a_stored_plan_says_so_and_offers_to_compute_it(operator, facts):
    run = started()
    sweeper.interrupt(sweeper.Finding(run.pk, "test: the worker vanished", {}), takeover=True)
    html = operator.get(url(run, "plan/")).content.decode()
    assert "No plan has been computed for this run yet" in html
    assert "Check targets again</button>" in html
    assert 'name="fingerprint"' not in html


def test_the_plan_page_says_when_the_run_changed_since_its_plan(operator, facts):
    run = executed(timeout="publish/promote-charge/after")
    edit_effect(
        Effect.objects.get(run=run, call_id="promote-charge").pk,
        {"status": Effect.Status.FAILED},
        reason="card processor shows no charge",
        actor="user:supervisor",
    )
    html = operator.get(url(run, "plan/")).content.decode()
    assert "the run changed since" in html

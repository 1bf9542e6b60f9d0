"""Bulk triage (runs/triage.py): runs that need a human grouped by the shape of their stored
plans, and one approval for a group or a selection of it — in the domain, the dashboard and
the CLI.

Runs are executed in this process (seed_demo.run_inline) inside the test's transaction and
their plans stored as the worker's plan job would; the fault tests run the same triage
against real workers after a Redis outage (tests/faults/test_outage.py).
"""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from demo.management.commands.seed_demo import run_inline
from demo.simulators import publish_facts
from runs import enqueue
from runs.ledger.chain import canonical_json
from runs.ledger.edits import edit_effect
from runs.models import Effect, Event, GroupApproval, Run, StoredPlan
from runs.planning import triage
from runs.planning.planner import compute_plan
from runs.quantities import money
from runs.reads import inbox
from tests.support.plans import (
    TOPIC,
    change_manifest,
    checkpoint,
    interrupted_with_plan,
    ledger_state,
    stopped_with_plan,
)
from tests.support.processes import wait_for
from tests.support.web import client_as

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def quick_settings(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Stages run inside the test's transaction: a heartbeat on its own connection must not
    # fire meanwhile (on SQLite it would wait on the test's write lock).
    settings.RESUMER_LEASE_TTL = 120


def failed_at_cover_upload() -> Run:
    """The call's answer was lost: the upload's outcome is unknown, the run failed."""
    return stopped_with_plan({"timeout": "visual/upload-cover/after"})


def group_of(run: Run) -> str:
    return StoredPlan.objects.values_list("shape", flat=True).get(run=run)


def stored_fingerprint(run: Run) -> str:
    return StoredPlan.objects.values_list("fingerprint", flat=True).get(run=run)


def approvals(run: Run) -> list[dict]:
    return list(
        Event.objects.filter(run=run, type=Event.Type.PLAN_APPROVED).values_list(
            "payload", flat=True
        )
    )


def status(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def manage(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


# --- Shapes and groups -----------------------------------------------------------------------


def test_runs_stopped_at_the_same_call_share_a_group_and_another_stop_is_another(facts):
    same = [failed_at_cover_upload() for _ in range(3)]
    blocked = stopped_with_plan({"timeout": "publish/promote-charge/after"})

    found = triage.groups()

    assert [(g.count, g.status, g.next_stage) for g in found.groups] == [
        (3, Run.Status.FAILED, "visual"),
        (1, Run.Status.FAILED, "publish"),
    ]
    big, small = found.groups
    assert {group_of(run) for run in same} == {big.fingerprint}
    # Three different plans (their keys and ids differ), one decision.
    assert len({stored_fingerprint(run) for run in same}) == 3
    rows = StoredPlan.objects.filter(run__in=same)
    assert big.resume_money == sum(row.resume_money for row in rows)
    assert big.sentence.startswith("3 runs failed at visual — strict resume reuses ")
    assert "retries with the same key upload_asset ×1" in big.sentence
    assert big.sentence.endswith(
        f"{money(big.resume_money)} in total; each publishes an article, charges $5.00"
    )
    assert group_of(blocked) == small.fingerprint
    assert small.blocked and not small.approvable
    assert "publish/promote-charge (unknown)" in small.sentence


def test_a_shape_names_nothing_of_its_run(facts):
    one, two = failed_at_cover_upload(), failed_at_cover_upload()
    plan = compute_plan(one)
    shape = triage.shape_of(plan.to_dict())

    assert shape == triage.shape_of(compute_plan(two).to_dict())
    text = canonical_json(shape)
    specific = [one.public_id, plan.checkpoint, *[e.delivery_key for e in plan.effects]]
    specific += [e.external_id for e in plan.effects if e.external_id]
    assert [value for value in specific if value and value in text] == []


def test_runs_without_a_current_plan_are_counted_not_grouped(facts):
    grouped = interrupted_with_plan()
    moved = interrupted_with_plan()
    # Appended after its plan was stored (and the plan job has not run): the stored plan is
    # of an older version of the run.
    Run.objects.filter(pk=moved.pk).update(version=moved.version + 1)

    found = triage.groups()

    assert [g.count for g in found.groups] == [1]
    assert found.groups[0].fingerprint == group_of(grouped)
    assert found.unplanned == 1


def test_grouping_reads_a_constant_number_of_queries(facts):
    def counted() -> int:
        with CaptureQueriesContext(connection) as ctx:
            inbox.inbox_groups(inbox.InboxFilters())
        return len(ctx.captured_queries)

    interrupted_with_plan()
    few = counted()
    for _ in range(4):
        interrupted_with_plan()
    failed_at_cover_upload()
    found = triage.groups()
    assert [g.count for g in found.groups] == [5, 1]
    assert counted() == few


# --- Approving a group -----------------------------------------------------------------------


def test_approving_a_group_approves_every_run_each_with_its_own_event_naming_the_batch(facts):
    runs = [interrupted_with_plan() for _ in range(3)]
    other = failed_at_cover_upload()
    fingerprints = {run.pk: stored_fingerprint(run) for run in runs}

    batch = triage.approve_group(group_of(runs[0]), actor="user:operator")

    assert sorted(a.run.pk for a in batch.approved) == [run.pk for run in runs]
    assert batch.skipped == []
    for run in runs:
        assert status(run) == Run.Status.RESUMING
        [payload] = approvals(run)
        assert payload["batch"] == batch.id
        assert payload["fingerprint"] == fingerprints[run.pk]
        assert payload["by"] == "user:operator"
    assert status(other) == Run.Status.FAILED
    assert approvals(other) == []
    assert [g.fingerprint for g in triage.groups().groups] == [group_of(other)]


def test_a_run_whose_plan_changed_after_the_group_was_shown_is_skipped_with_its_fresh_plan(
    facts,
):
    runs = [failed_at_cover_upload() for _ in range(3)]
    group = group_of(runs[0])
    shown, members = triage.group(group)
    moved = runs[1]
    before = stored_fingerprint(moved)
    # After the page was read, someone rewrites a checkpoint of one run: its fresh plan falls
    # back past it. Its stored plan (and so the group) still says what was shown.
    change_manifest(checkpoint(moved, "draft"), outputs={"title": "rewritten"})

    batch = triage.approve_group(group, [m.run_pk for m in members], actor="user:operator")

    assert sorted(a.run.pk for a in batch.approved) == [runs[0].pk, runs[2].pk]
    [skipped] = batch.skipped
    assert skipped.run_pk == moved.pk
    assert "changed since" in skipped.reason
    assert skipped.plan.fingerprint != before
    assert skipped.plan.fallbacks
    assert status(moved) == Run.Status.FAILED
    assert approvals(moved) == []
    # The fresh plan is now the run's stored plan, in a group of its own.
    assert stored_fingerprint(moved) == skipped.plan.fingerprint
    assert group_of(moved) == skipped.group != group
    for run in (runs[0], runs[2]):
        assert approvals(run)[0]["batch"] == batch.id


def test_a_selected_run_that_left_the_group_is_skipped_with_its_fresh_plan(facts):
    stays, leaves = failed_at_cover_upload(), failed_at_cover_upload()
    group = group_of(stays)
    # A supervisor checked with the asset store: the cover was uploaded. The run's plan now
    # reuses it (a different decision); its stored plan is of an older version meanwhile.
    cover = Effect.objects.get(run=leaves, call_id="upload-cover")
    edit_effect(
        cover.pk,
        {"status": Effect.Status.CONFIRMED, "external_id": "asset-checked"},
        reason="checked with the asset store",
        actor="user:supervisor",
    )

    batch = triage.approve_group(group, [stays.pk, leaves.pk], actor="user:operator")

    assert [a.run.pk for a in batch.approved] == [stays.pk]
    [skipped] = batch.skipped
    assert (skipped.run_pk, skipped.reason) == (
        leaves.pk,
        "its plan changed since the group was shown; read the fresh plan",
    )
    assert status(leaves) == Run.Status.FAILED
    assert approvals(leaves) == []
    leaves.refresh_from_db()
    stored = StoredPlan.objects.get(run=leaves)
    assert (stored.run_version, stored.fingerprint) == (leaves.version, skipped.plan.fingerprint)
    assert stored.shape != group


def test_a_run_that_was_never_in_the_group_is_skipped_as_such(facts):
    member = failed_at_cover_upload()
    other = stopped_with_plan({"timeout": "publish/promote-charge/after"})
    group = group_of(member)

    batch = triage.approve_group(group, [other.pk], actor="user:operator")

    [skipped] = batch.skipped
    assert (skipped.run_pk, skipped.reason) == (
        other.pk,
        "it is not in this group: its plan is of another shape",
    )
    assert batch.approved == [] and approvals(other) == []


def test_a_selection_approves_only_the_selected_runs(facts):
    first, second, third = (interrupted_with_plan() for _ in range(3))
    group = group_of(first)

    batch = triage.approve_group(group, [first.pk, third.pk], actor="user:operator")

    assert sorted(a.run.pk for a in batch.approved) == [first.pk, third.pk]
    assert status(second) == Run.Status.INTERRUPTED
    assert approvals(second) == []
    assert triage.group(group)[0].count == 1


def test_a_group_with_drift_can_be_upgraded_in_one_step(facts):
    runs = [interrupted_with_plan() for _ in range(2)]
    publish_facts(TOPIC)
    for run in runs:
        triage.stored_plans.refresh(run)
    group = group_of(runs[0])
    assert triage.group(group)[0].shape["drift"] == [["facts", "v3", "v4"]]

    batch = triage.approve_group(group, action="upgrade", actor="user:operator")

    assert len(batch.approved) == 2
    for approval in batch.approved:
        assert approval.run.status == Run.Status.SUPERSEDED
        assert approval.branch.inputs["facts"] == "v4"


def test_thousands_of_unknown_runs_are_named_by_their_first_few(facts):
    run = failed_at_cover_upload()
    unknown = list(range(900_000_000, 900_005_000))

    with pytest.raises(triage.BadSelection) as refused:
        triage.approve_group(group_of(run), unknown, action="strict", actor="user:operator")

    said = str(refused.value)
    assert said.startswith("there is no run-900000000, run-900000001, ")
    assert said.endswith(" and 4,990 more") and len(said) < 300
    assert status(run) == Run.Status.FAILED


@pytest.mark.parametrize(
    "fingerprint,run_ids,action,message",
    [
        ("not-a-fingerprint", None, "strict", "64 hexadecimal"),
        ("{group}", None, "retry", "unknown action"),
        ("{group}", [], "strict", "select at least one run"),
        ("{group}", [999_999_999], "strict", "there is no run-999999999"),
        ("0" * 64, None, "strict", "no run needing a human has a plan of this shape"),
        ("{group}", None, "upgrade", "no upgrade is offered"),
        ("{blocked}", None, "strict", "blocked"),
    ],
    ids=[
        "bad-fingerprint",
        "bad-action",
        "empty",
        "unknown-run",
        "no-such-group",
        "upgrade",
        "blocked",
    ],
)
def test_a_refused_group_approval_changes_nothing(facts, fingerprint, run_ids, action, message):
    run = failed_at_cover_upload()
    blocked = stopped_with_plan({"timeout": "publish/promote-charge/after"})
    fingerprint = fingerprint.format(group=group_of(run), blocked=group_of(blocked))
    before = [ledger_state(run), ledger_state(blocked)]

    with pytest.raises(triage.GroupRefused, match=message):
        triage.approve_group(fingerprint, run_ids, action=action, actor="user:operator")

    assert [ledger_state(run), ledger_state(blocked)] == before


# --- The CLI ---------------------------------------------------------------------------------


def test_plan_groups_lists_each_group_with_the_command_that_approves_it(facts):
    runs = [interrupted_with_plan() for _ in range(2)]
    group = group_of(runs[0])

    text = manage("plan", "--groups")

    assert f"group {group}\n  2 runs interrupted at research — strict resume " in text
    assert f"approve: manage.py resume --group {group} --strict" in text


def test_resume_group_approves_the_group_from_the_cli(facts):
    runs = [interrupted_with_plan() for _ in range(2)]
    group = group_of(runs[0])

    text = manage("resume", "--group", group, "--strict", "--fingerprint", group, "--actor", "ops")

    assert text.splitlines()[-1].endswith("approved 2, skipped 0")
    batch = re.search(r"batch ([0-9a-f]{32})", text).group(1)
    for run in runs:
        assert f"{run.public_id} resuming at research" in text
        assert approvals(run)[0]["batch"] == batch
        assert approvals(run)[0]["by"] == "user:ops"


def test_resume_group_with_runs_approves_only_those(facts):
    first, second = interrupted_with_plan(), interrupted_with_plan()

    manage("resume", "--group", group_of(first), "--strict", "--runs", f"{second.public_id}")

    assert (status(first), status(second)) == (Run.Status.INTERRUPTED, Run.Status.RESUMING)


def test_resume_group_where_every_run_moved_is_an_error_listing_the_fresh_plans(facts):
    run = failed_at_cover_upload()
    group = group_of(run)
    change_manifest(checkpoint(run, "draft"), outputs={"title": "rewritten"})

    with pytest.raises(CommandError, match="approved 0, skipped 1; nothing was approved"):
        manage("resume", "--group", group, "--strict")

    assert approvals(run) == []
    assert stored_fingerprint(run) == compute_plan(run).fingerprint


@pytest.mark.parametrize(
    "args",
    [
        ["--group", "xyz", "--strict"],
        ["--group", "0" * 64, "--strict"],
        ["--group", "{group}", "--strict", "--fingerprint", "a" * 64],
        ["--group", "{group}", "--strict", "--runs", "run-abc"],
        ["--group", "{group}", "--strict", "--runs", "run-999999999"],
        ["--group", "{group}", "--upgrade"],
        ["{run}", "--group", "{group}", "--strict"],
        ["--group", "{group}"],
        ["{run}", "--strict"],
    ],
    ids=[
        "bad-fingerprint",
        "no-such-group",
        "other-fingerprint",
        "bad-run-id",
        "unknown-run",
        "no-upgrade",
        "run-and-group",
        "no-action",
        "run-without-fingerprint",
    ],
)
def test_resume_group_bad_input_is_a_command_error_and_changes_nothing(facts, args):
    run = interrupted_with_plan()
    args = [a.format(group=group_of(run), run=run.public_id) for a in args]
    before = ledger_state(run)

    with pytest.raises(CommandError):
        manage("resume", *args)

    assert ledger_state(run) == before


@pytest.mark.parametrize("args", [[], ["run-1", "--groups"]], ids=["nothing", "both"])
def test_plan_needs_a_run_or_groups(facts, args):
    with pytest.raises(CommandError, match="name a run"):
        manage("plan", *args)


# --- The dashboard ---------------------------------------------------------------------------


def test_inbox_shows_the_groups_above_the_runs(facts):
    runs = [interrupted_with_plan() for _ in range(2)]
    group = group_of(runs[0])

    html = client_as("viewer").get("/runs/").content.decode()

    assert "2 runs interrupted at research" in html
    assert f'href="/runs/groups/{group}/"' in html
    assert html.index('id="triage-groups"') < html.index('id="inbox-results"')


def test_inbox_groups_follow_the_filters_and_the_htmx_swap(facts):
    interrupted_with_plan()
    viewer = client_as("viewer")

    assert "interrupted at research" not in viewer.get("/runs/?status=pending").content.decode()
    html = viewer.get("/runs/?pipeline=content", headers={"HX-Request": "true"}).content.decode()
    assert 'id="triage-groups" class="triage" aria-labelledby="triage-h" hx-swap-oob="true"' in html
    assert "1 run interrupted at research" in html
    assert 'id="inbox-results"' in html


def test_inbox_query_count_does_not_grow_with_groups_or_runs(facts):
    viewer = client_as("viewer")
    interrupted_with_plan()

    def counted() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert viewer.get("/runs/").status_code == 200
        return len(ctx.captured_queries)

    few = counted()
    for _ in range(5):
        interrupted_with_plan()
    failed_at_cover_upload()
    assert counted() == few


def approve_all_shown(group: str, runs: list[Run], role: str = "operator", **kwargs):
    """What the group page's "Approve all runs shown" button sends."""
    return client_as(role, **kwargs).post(
        f"/runs/groups/{group}/approve/",
        {
            "action": "strict",
            "fingerprint": group,
            "confirm": "on",
            "scope": "all",
            "shown": ",".join(run.public_id for run in runs),
        },
    )


def test_group_page_shows_the_shape_and_the_runs_to_tick(facts):
    runs = [interrupted_with_plan() for _ in range(2)]
    group = group_of(runs[0])

    html = client_as("operator").get(f"/runs/groups/{group}/").content.decode()

    assert "2 runs interrupted at research" in html
    for run in runs:
        assert f'name="runs" value="{run.public_id}"' in html
    assert f'name="shown" value="{runs[0].public_id},{runs[1].public_id}"' in html
    assert f'name="fingerprint" value="{group}"' in html
    assert "Approve all 2 runs shown" in html
    assert "Approve the ticked runs only" in html


def test_viewer_reads_a_group_without_an_approve_control(facts):
    run = interrupted_with_plan()

    html = client_as("viewer").get(f"/runs/groups/{group_of(run)}/").content.decode()

    assert "Approving needs the operator role" in html
    assert 'type="submit"' not in html.split('id="approve-h"')[1].split("</form>")[0]


@pytest.mark.parametrize("path", ["0" * 64, "xyz", "A" * 64])
def test_an_unknown_or_malformed_group_is_404(facts, path):
    interrupted_with_plan()
    assert client_as("viewer").get(f"/runs/groups/{path}/").status_code == 404


def test_operator_approves_every_run_shown_through_the_dashboard(facts):
    runs = [interrupted_with_plan() for _ in range(2)]
    group = group_of(runs[0])

    response = approve_all_shown(group, runs)

    assert response.status_code == 200
    html = response.content.decode()
    assert "Approved 2, skipped 0" in html
    batch = approvals(runs[0])[0]["batch"]
    assert batch in html
    assert [approvals(run)[0]["batch"] for run in runs] == [batch, batch]
    assert {status(run) for run in runs} == {Run.Status.RESUMING}


def test_a_run_that_joined_the_group_after_the_page_was_shown_is_left_alone(facts):
    shown = interrupted_with_plan()
    joined = interrupted_with_plan()

    response = approve_all_shown(group_of(shown), [shown])

    assert response.status_code == 200
    assert (status(shown), status(joined)) == (Run.Status.RESUMING, Run.Status.INTERRUPTED)
    assert approvals(joined) == []


def test_operator_approves_the_ticked_runs_through_the_dashboard(facts):
    ticked, left = interrupted_with_plan(), interrupted_with_plan()
    group = group_of(ticked)

    response = client_as("operator").post(
        f"/runs/groups/{group}/approve/",
        {
            "action": "strict",
            "fingerprint": group,
            "confirm": "on",
            "scope": "selected",
            "shown": f"{ticked.public_id},{left.public_id}",
            "runs": [ticked.public_id],
        },
    )

    assert response.status_code == 200
    assert (status(ticked), status(left)) == (Run.Status.RESUMING, Run.Status.INTERRUPTED)


def test_a_dashboard_batch_lists_the_skipped_run_with_its_fresh_plan(facts):
    kept, moved = failed_at_cover_upload(), failed_at_cover_upload()
    group = group_of(kept)
    change_manifest(checkpoint(moved, "draft"), outputs={"title": "rewritten"})

    response = approve_all_shown(group, [kept, moved])

    assert response.status_code == 200
    html = response.content.decode()
    assert "Approved 1, skipped 1" in html
    assert f"{moved.public_id}</a>: the plan changed since it was shown" in html
    assert stored_fingerprint(moved)[:12] in html


def test_a_dashboard_batch_with_nothing_approved_is_409(facts):
    run = failed_at_cover_upload()
    group = group_of(run)
    change_manifest(checkpoint(run, "draft"), outputs={"title": "rewritten"})

    response = approve_all_shown(group, [run])

    assert response.status_code == 409
    assert "Approved 0, skipped 1" in response.content.decode()
    assert approvals(run) == []


def test_viewer_forged_group_approval_is_403_and_changes_nothing(facts):
    run = interrupted_with_plan()
    before = ledger_state(run)

    response = approve_all_shown(group_of(run), [run], role="viewer")

    assert response.status_code == 403
    assert ledger_state(run) == before


def test_group_approval_without_csrf_token_is_403(facts):
    run = interrupted_with_plan()

    response = approve_all_shown(group_of(run), [run], enforce_csrf_checks=True)

    assert response.status_code == 403
    assert approvals(run) == []


VALID = {"action": "strict", "fingerprint": "{group}", "confirm": "on", "scope": "all"}


@pytest.mark.parametrize(
    "data,message",
    [
        ({**VALID, "confirm": "", "shown": "{run}"}, "I have read"),
        ({**VALID, "scope": "selected", "shown": "{run}"}, "Tick at least one run"),
        (VALID, "did not say which runs it showed"),
        ({**VALID, "shown": "{run},run-x"}, "run-x is not a run id"),
        ({**VALID, "scope": "selected", "runs": ["nope"]}, "nope is not a run id"),
        ({**VALID, "fingerprint": "a" * 64, "shown": "{run}"}, "another group"),
        ({**VALID, "action": "retry", "shown": "{run}"}, "Select a valid choice"),
        ({**VALID, "scope": "everything", "shown": "{run}"}, "Select a valid choice"),
        ({**VALID, "shown": "{run},run-999999999"}, "there is no run-999999999"),
    ],
    ids=[
        "no-confirm",
        "no-ticked-runs",
        "no-shown-runs",
        "bad-shown-id",
        "bad-ticked-id",
        "other-group",
        "bad-action",
        "bad-scope",
        "unknown-run",
    ],
)
def test_malformed_group_approvals_are_400_and_change_nothing(facts, data, message):
    run = interrupted_with_plan()
    group = group_of(run)
    data = {
        key: [v.format(group=group, run=run.public_id) for v in value]
        if isinstance(value, list)
        else value.format(group=group, run=run.public_id)
        for key, value in data.items()
    }
    before = ledger_state(run)

    response = client_as("operator").post(f"/runs/groups/{group}/approve/", data)

    assert response.status_code == 400
    assert message in response.content.decode()
    assert ledger_state(run) == before


def test_approving_a_group_that_emptied_meanwhile_is_409_and_changes_nothing(facts):
    run = interrupted_with_plan()
    group = group_of(run)
    triage.approve_group(group, actor="user:someone-else")
    before = ledger_state(run)

    response = approve_all_shown(group, [run])

    # The one run of the group is resuming already: no run has this plan shape any more.
    assert response.status_code == 409
    assert "no run needing a human has a plan of this shape now" in response.content.decode()
    assert ledger_state(run) == before


# --- A large group is approved by a worker ---------------------------------------------------


def batch_of(response) -> GroupApproval:
    assert response.status_code == 302, response.content.decode()[:500]
    batch_id = response["Location"].rstrip("/").rsplit("/", 1)[1]
    assert response["Location"] == f"/runs/batches/{batch_id}/"
    return GroupApproval.objects.get(pk=batch_id)


def test_a_large_group_approval_is_queued_and_its_page_says_it_is_being_approved(
    facts, redis_conn, settings, django_capture_on_commit_callbacks
):
    settings.RESUMER_GROUP_INLINE = 1
    runs = [interrupted_with_plan() for _ in range(2)]
    group = group_of(runs[0])
    redis_conn.flushdb()  # the plan jobs the stops queued
    before = [ledger_state(run) for run in runs]

    # The job is queued once the row is committed (here: the test's transaction stands in).
    with django_capture_on_commit_callbacks(execute=True):
        row = batch_of(approve_all_shown(group, runs))

    # Recorded and queued; nothing approved yet.
    assert (row.state, row.group, row.action, row.actor) == (
        GroupApproval.State.QUEUED,
        group,
        "strict",
        "user:operator",
    )
    assert row.run_ids == [run.pk for run in runs]
    assert enqueue.queue().job_ids == [f"batch-{row.pk}"]
    assert [ledger_state(run) for run in runs] == before

    page = client_as("viewer").get(f"/runs/batches/{row.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Approving 2 runs: waiting for a worker" in html
    assert 'hx-trigger="every 2s"' in html


def test_the_batch_job_approves_each_run_and_lists_a_moved_one_with_its_fresh_plan(facts, settings):
    kept, moved = failed_at_cover_upload(), failed_at_cover_upload()
    group = group_of(kept)
    row = triage.start_batch(group, [kept.pk, moved.pk], action="strict", actor="user:operator")
    change_manifest(checkpoint(moved, "draft"), outputs={"title": "rewritten"})

    assert triage.run_batch(row.pk).state == GroupApproval.State.DONE

    row.refresh_from_db()
    assert [a["run"] for a in row.approved] == [kept.pk]
    assert [a["batch"] for a in approvals(kept)] == [row.pk]
    assert approvals(moved) == []
    assert status(moved) == Run.Status.FAILED
    [skipped] = row.skipped
    assert skipped["run"] == moved.pk
    assert "the plan changed since it was shown" in skipped["reason"]
    assert skipped["plan"]["fingerprint"] == stored_fingerprint(moved)
    # Run again (a retried job), a finished batch does nothing.
    assert triage.run_batch(row.pk).approved == row.approved
    assert len(approvals(kept)) == 1

    html = client_as("viewer").get(f"/runs/batches/{row.pk}/").content.decode()
    assert "Approved 1, skipped 1" in html
    assert f"{moved.public_id}</a>: the plan changed since it was shown" in html
    assert stored_fingerprint(moved)[:12] in html
    # The batch is done, but the run it approved is still resuming: the page follows it
    # (issue 24) until it settles, then stops asking.
    assert "waiting for a worker to run" in html and 'hx-trigger="every 2s"' in html
    run_inline(kept.pk)
    html = client_as("viewer").get(f"/runs/batches/{row.pk}/").content.decode()
    assert '<span class="badge status-succeeded">Succeeded</span> </td>' in html
    assert "hx-trigger" not in html


def test_a_batch_whose_group_emptied_before_the_job_came_is_refused_as_a_whole(facts):
    run = interrupted_with_plan()
    group = group_of(run)
    row = triage.start_batch(group, [run.pk], action="strict", actor="user:operator")
    triage.approve_group(group, actor="user:someone-else")
    before = ledger_state(run)

    assert triage.run_batch(row.pk).state == GroupApproval.State.REFUSED

    row.refresh_from_db()
    assert "no run needing a human has a plan of this shape now" in row.error
    assert (row.approved, row.skipped) == ([], [])
    assert ledger_state(run) == before
    html = client_as("operator").get(f"/runs/batches/{row.pk}/").content.decode()
    assert "Not approved: the batch was refused" in html


def test_viewer_forged_large_group_approval_is_403_and_records_nothing(
    facts, redis_conn, settings, django_capture_on_commit_callbacks
):
    settings.RESUMER_GROUP_INLINE = 0
    run = interrupted_with_plan()
    redis_conn.flushdb()
    before = ledger_state(run)

    with django_capture_on_commit_callbacks(execute=True):
        response = approve_all_shown(group_of(run), [run], role="viewer")

    assert response.status_code == 403
    assert not GroupApproval.objects.exists()
    assert enqueue.queue().job_ids == []
    assert ledger_state(run) == before


def test_a_large_group_that_cannot_be_approved_is_refused_in_the_request(
    facts, redis_conn, settings, django_capture_on_commit_callbacks
):
    settings.RESUMER_GROUP_INLINE = 0
    run = interrupted_with_plan()
    group = group_of(run)
    triage.approve_group(group, actor="user:someone-else")
    redis_conn.flushdb()

    with django_capture_on_commit_callbacks(execute=True):
        response = approve_all_shown(group, [run])

    assert response.status_code == 409
    assert "no run needing a human has a plan of this shape now" in response.content.decode()
    assert not GroupApproval.objects.exists()
    assert enqueue.queue().job_ids == []


def test_a_large_group_whose_job_cannot_be_queued_is_503_and_its_batch_says_failed(
    facts, settings, monkeypatch
):
    settings.RESUMER_GROUP_INLINE = 0
    run = interrupted_with_plan()
    group = group_of(run)
    before = ledger_state(run)

    def redis_away(batch_id: str, runs: int) -> None:
        raise ConnectionError("Redis is away")

    monkeypatch.setattr(triage, "enqueue_batch", redis_away)
    response = approve_all_shown(group, [run])

    # Nothing was approved, and the recorded batch says why it never ran.
    assert response.status_code == 503
    assert "the job could not be queued: Redis is away" in response.content.decode()
    row = GroupApproval.objects.get()
    assert (row.state, row.run_ids) == (GroupApproval.State.FAILED, [run.pk])
    assert approvals(run) == []
    assert ledger_state(run) == before


def test_an_unknown_batch_is_404(facts):
    assert client_as("viewer").get(f"/runs/batches/{'0' * 32}/").status_code == 404
    assert client_as("viewer").get("/runs/batches/xyz/").status_code == 404


def test_a_worker_approves_a_large_group_the_dashboard_queued(workers, redis_conn, settings):
    settings.RESUMER_GROUP_INLINE = 1
    runs = [interrupted_with_plan() for _ in range(3)]
    group = group_of(runs[0])

    row = batch_of(approve_all_shown(group, runs))
    workers.start()
    wait_for(lambda: GroupApproval.objects.get(pk=row.pk).finished, timeout=120, what="the batch")

    row.refresh_from_db()
    assert (row.state, row.error, row.skipped) == (GroupApproval.State.DONE, "", [])
    assert sorted(a["run"] for a in row.approved) == sorted(run.pk for run in runs)
    for run in runs:
        assert [a["batch"] for a in approvals(run)] == [row.pk]
        assert status(run) != Run.Status.INTERRUPTED
    html = client_as("operator").get(f"/runs/batches/{row.pk}/").content.decode()
    assert "Approved 3, skipped 0" in html

"""`manage.py seed_demo`: the demo users and runs in every state, without a worker.

transactional_db: the story's crash happens in a forked child process, which must see (and
write) committed rows.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import RequestFactory

from demo.management.commands.seed_demo import DRIFT_TOPIC
from demo.models import RunFaults
from runs.access import roles
from runs.models import Effect, Event, Gate, Run
from runs.planning.planner import Action, compute_plan


@pytest.fixture(autouse=True)
def fast_passwords(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def seed() -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def test_seed_demo_creates_users_and_runs_in_every_state(
    transactional_db, redis_conn, demo_service
):
    output = seed()

    for username, role in (
        ("viewer", "viewer"),
        ("operator", "operator"),
        ("supervisor", "supervisor"),
    ):
        user = User.objects.get(username=username)
        assert roles.roles(user) == {role}
        assert user.is_staff == (role == "supervisor")
        request = RequestFactory().post("/login/")
        assert authenticate(request, username=username, password=f"{username}-demo-pass") == user

    runs = list(Run.objects.order_by("id"))
    statuses = [r.status for r in runs]
    for status in (
        Run.Status.SUCCEEDED,
        Run.Status.PENDING,
        Run.Status.FAILED,
        Run.Status.INTERRUPTED,
    ):
        assert status in statuses, status

    # The story: the worker process really died uploading the cover.
    story = next(r for r in runs if r.status == Run.Status.INTERRUPTED)
    assert RunFaults.objects.get(run=story).crash == "visual/upload-cover/before"
    interrupted = Event.objects.get(run=story, type=Event.Type.INTERRUPTED)
    assert interrupted.payload["exitcode"] == "-9"
    cover = Effect.objects.get(run=story, call_id="upload-cover")
    assert cover.status == Effect.Status.INTENT
    plan = compute_plan(story)
    assert plan.next_stage == "visual" and plan.can_strict

    # Killed inside research's agent loop: the recorded model turn is reused, the search
    # re-runs (SAFE) and only the missing turn is called.
    loop = RunFaults.objects.get(crash="research/search-1/before").run
    assert loop.status == Run.Status.INTERRUPTED
    actions = {e.call_id: e.action for e in compute_plan(loop).effects if e.stage == "research"}
    assert actions == {"turn-1": Action.REUSE, "search-1": Action.RERUN, "turn-2": Action.CALL}

    # The unknown charge blocks its plan until a supervisor edits the ledger.
    blocked = RunFaults.objects.get(timeout="publish/promote-charge/after").run
    assert compute_plan(blocked).blocked

    # The runs reached the demo service over HTTP: the clean run's article is live there.
    clean = next(r for r in runs if r.status == Run.Status.SUCCEEDED)
    article = Effect.objects.get(run=clean, call_id="publish").external_id
    assert article in [a["id"] for a in demo_service.articles()]

    # Facts drifted for the other topic only.
    drift = next(r for r in runs if r.inputs["topic"] == DRIFT_TOPIC)
    plan = compute_plan(drift)
    assert [(d.input, d.pinned, d.current) for d in plan.drift] == [("facts", "v3", "v4")]
    assert plan.can_upgrade and plan.can_strict
    assert {e.call_id: e.action for e in plan.effects}["publish"] == Action.RECORD_FOUND
    others = [r for r in runs if r.inputs["topic"] != DRIFT_TOPIC]
    assert all(not compute_plan(r).drift for r in others)

    # Two runs wait for a human: one at the review, one (reviewed) at the charge's
    # confirmation, which only a supervisor may give.
    waiting = Gate.objects.filter(status=Gate.Status.OPEN, run__status=Run.Status.WAITING)
    assert sorted((g.gate_id, g.role) for g in waiting) == [
        ("promote-charge", "supervisor"),
        ("review", "operator"),
    ]

    # The pending run went to the queue (Redis answers here) for the worker to pick up.
    pending = next(r for r in runs if r.status == Run.Status.PENDING)
    assert RunFaults.objects.get(run=pending).delay == 2.0
    assert redis_conn.keys("rq:job:run-*")

    assert "viewer / viewer-demo-pass" in output
    assert output.count("run-") >= len(runs)

    # Again: nothing is duplicated, and it says so.
    again = seed()
    assert "demo data already present" in again
    assert Run.objects.count() == len(runs)
    assert User.objects.filter(username__in=["viewer", "operator", "supervisor"]).count() == 3


def test_an_existing_user_keeps_its_password(db):
    user, _ = roles.ensure_user("operator", "operator-demo-pass", roles.OPERATOR)
    user.set_password("changed-on-purpose-123")
    user.save()
    roles.ensure_user("operator", "operator-demo-pass", roles.OPERATOR)
    user.refresh_from_db()
    assert user.check_password("changed-on-purpose-123")


def test_seed_demo_without_the_demo_service_says_where_it_looked_and_adds_no_run(db, settings):
    settings.DEMO_SERVICE_URL = "http://127.0.0.1:9"  # the discard port: nothing answers
    with pytest.raises(CommandError, match="does not answer at http://127.0.0.1:9"):
        call_command("seed_demo", stdout=StringIO())
    assert not Run.objects.exists()


def test_seed_demo_refuses_production(db, settings):
    settings.PRODUCTION = True
    with pytest.raises(CommandError, match="production"):
        call_command("seed_demo", stdout=StringIO())
    assert not User.objects.filter(username="viewer").exists()

"""The admin: the ledger is read-only there, except the effect ledger a supervisor corrects
through edit_effect() with a reason."""

from __future__ import annotations

import django_rq
import pytest
from django.apps import apps
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rq.job import Job
from rq.worker import Worker

from runs import engine
from runs.access import roles
from runs.dashboard.forms import EffectLedgerForm
from runs.ledger import leases
from runs.ledger.append import LedgerError, Writer
from runs.ledger.edits import edit_effect
from runs.ledger.effects import record_intent
from runs.ledger.reasons import MAX_REASON_CHARS
from runs.models import Artifact, Checkpoint, Effect, Event, Lease, Run
from runs.planning import stored_plans
from runs.planning.planner import Action, compute_plan
from tests.support.events import called
from tests.support.plans import charge_unknown

pytestmark = pytest.mark.django_db

READ_ONLY = (Run, Event, Checkpoint, Artifact, Lease)


@pytest.fixture(autouse=True)
def quick_settings(settings) -> None:
    # The default hasher is slow on purpose; four users per test would cost seconds.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Stages run in this test's transaction; a heartbeat (on its own connection, every
    # TTL/3) must not fire during them, or on SQLite it would wait on the test's write lock.
    settings.RESUMER_LEASE_TTL = 120


@pytest.fixture
def users(db) -> dict[str, User]:
    return {role: roles.ensure_user(role, f"{role}-demo-pass", role)[0] for role in roles.ROLES}


@pytest.fixture
def supervisor(users) -> Client:
    client = Client()
    client.force_login(users["supervisor"])
    return client


def change_url(obj) -> str:
    meta = obj._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])


def edits(run: Run) -> list[Event]:
    return list(Event.objects.filter(run=run, type=Event.Type.LEDGER_EDITED))


def test_every_model_is_registered():
    for label in ("runs", "demo"):
        for model in apps.get_app_config(label).get_models():
            assert admin.site.is_registered(model), model


def test_supervisor_browses_every_changelist_and_object(supervisor, facts):
    run = charge_unknown()
    objects = [
        run,
        Event.objects.filter(run=run).first(),
        Checkpoint.objects.filter(run=run).first(),
        Artifact.objects.first(),
        Lease.objects.get(run=run),
        Effect.objects.filter(run=run).first(),
    ]
    for label in ("runs", "demo"):
        for model in apps.get_app_config(label).get_models():
            meta = model._meta
            response = supervisor.get(
                reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
            )
            assert response.status_code == 200, model
            first = model.objects.first()
            if first is not None:
                objects.append(first)
    for obj in objects:
        assert supervisor.get(change_url(obj)).status_code == 200, obj
    index = supervisor.get("/admin/").content.decode()
    assert "/admin/rq/" in index
    assert "Effects" in index and "Events" in index


def test_operators_and_viewers_are_not_staff(users):
    for role in (roles.VIEWER, roles.OPERATOR):
        client = Client()
        client.force_login(users[role])
        response = client.get("/admin/")
        assert response.status_code == 302
        assert "/admin/login/" in response["Location"]
        assert client.get("/admin/rq/").status_code == 302


def test_the_queue_pages_are_reachable_for_supervisors(supervisor):
    response = supervisor.get("/admin/rq/")
    assert response.status_code == 200
    assert b"default" in response.content


def test_ledger_tables_are_read_only_even_for_supervisors(supervisor, facts):
    run = charge_unknown()
    rows = [
        run,
        Event.objects.filter(run=run).first(),
        Checkpoint.objects.filter(run=run).first(),
        Artifact.objects.first(),
        Lease.objects.get(run=run),
    ]
    for obj in rows:
        meta = obj._meta
        assert (
            supervisor.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_add")).status_code
            == 403
        )
        page = supervisor.get(change_url(obj)).content.decode()
        assert 'name="_save"' not in page, obj
        assert supervisor.post(change_url(obj), {}).status_code == 403, obj
        delete = reverse(f"admin:{meta.app_label}_{meta.model_name}_delete", args=[obj.pk])
        assert supervisor.post(delete, {"post": "yes"}).status_code == 403, obj
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert Event.objects.filter(run=run).count() == run.last_seq


def test_effects_cannot_be_added_or_deleted(supervisor, facts):
    effect = Effect.objects.filter(run=charge_unknown()).first()
    assert supervisor.get(reverse("admin:runs_effect_add")).status_code == 403
    delete = reverse("admin:runs_effect_delete", args=[effect.pk])
    assert supervisor.post(delete, {"post": "yes"}).status_code == 403
    assert Effect.objects.filter(pk=effect.pk).exists()


def _charge(run: Run) -> Effect:
    return Effect.objects.get(run=run, call_id="promote-charge")


def test_ledger_edit_without_a_reason_is_a_form_error(supervisor, facts):
    run = charge_unknown()
    effect = _charge(run)
    page = supervisor.get(change_url(effect)).content.decode()
    assert 'name="reason"' in page
    response = supervisor.post(
        change_url(effect),
        {"status": "failed", "external_id": "", "error": "", "reason": "", "_save": "Save"},
    )
    assert response.status_code == 200
    assert "This field is required." in response.content.decode()
    # The page names the effect by what the ledger holds, not by the refused values.
    assert "charge_card:promote-charge [unknown]" in response.content.decode()
    assert _charge(run).status == Effect.Status.UNKNOWN
    assert edits(run) == []
    assert compute_plan(run).blocked


def test_ledger_edit_with_a_reason_goes_through_the_ledger_and_unblocks_the_plan(supervisor, facts):
    run = charge_unknown()
    effect = _charge(run)
    before = compute_plan(run)
    assert before.blocked
    response = supervisor.post(
        change_url(effect),
        {
            "status": "failed",
            "external_id": "",
            "error": effect.error,
            "reason": "checked with the card processor: no charge was made",
            "_save": "Save",
        },
    )
    assert response.status_code == 302
    assert _charge(run).status == Effect.Status.FAILED
    [event] = edits(run)
    assert event.actor == "user:supervisor"
    assert event.payload["reason"] == "checked with the card processor: no charge was made"
    assert event.payload["before"]["status"] == "unknown"
    assert event.payload["after"]["status"] == "failed"
    after = compute_plan(run)
    assert not after.blocked
    assert {e.call_id: e.action for e in after.effects}["promote-charge"] == Action.CALL
    # The dashboard shows the unblocked plan once the edit's plan job stored it (this test's
    # transaction never commits, so it is run here).
    stored_plans.refresh(run)
    html = supervisor.get(f"/runs/{run.public_id}/plan/").content.decode()
    assert "Blocked: a human decides first" not in html
    assert ">Strict resume</button>" in html


def test_a_valid_ledger_form_writes_nothing_until_the_admin_applies_it(facts):
    run = charge_unknown()
    effect = _charge(run)
    data = {"status": "failed", "external_id": "", "error": "", "reason": "no charge made"}
    form = EffectLedgerForm(data, instance=effect)
    assert form.is_valid()
    assert form.changes() == {"status": "failed", "error": ""}


def test_a_reason_above_the_limit_is_a_form_error_and_writes_nothing(supervisor, facts):
    run = charge_unknown()
    effect = _charge(run)
    stored = Artifact.objects.count()
    response = supervisor.post(
        change_url(effect),
        {"status": "failed", "external_id": "", "error": "", "reason": "r" * 1_000_000},
    )
    assert response.status_code == 200
    assert "at most 2000 characters" in response.content.decode()
    assert _charge(run).status == Effect.Status.UNKNOWN
    assert edits(run) == []
    assert Artifact.objects.count() == stored


def test_edit_effect_refuses_a_reason_above_the_limit(facts):
    run = charge_unknown()
    with pytest.raises(LedgerError, match="limited to 2000 characters"):
        edit_effect(
            _charge(run).pk,
            {"status": "failed"},
            reason="r" * (MAX_REASON_CHARS + 1),
            actor="user:supervisor",
        )
    assert _charge(run).status == Effect.Status.UNKNOWN
    assert edits(run) == []


def test_edit_effect_accepts_a_reason_at_the_limit(facts):
    run = charge_unknown()
    reason = "r" * MAX_REASON_CHARS
    edit_effect(_charge(run).pk, {"status": "failed"}, reason=reason, actor="user:s")
    assert [event.payload["reason"] for event in edits(run)] == [reason]
    assert _charge(run).status == Effect.Status.FAILED


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"status": "unknown", "external_id": ""}, "nothing changed"),
        ({"status": "confirmed", "external_id": ""}, "external"),
    ],
)
def test_ledger_refusals_are_form_errors(supervisor, facts, data, message):
    run = charge_unknown()
    effect = _charge(run)
    response = supervisor.post(
        change_url(effect),
        {"error": effect.error, "reason": "a reason", "_save": "Save", **data},
    )
    assert response.status_code == 200
    assert message in response.content.decode()
    assert _charge(run).status == Effect.Status.UNKNOWN
    assert edits(run) == []


def test_an_external_id_too_long_is_said_once_beside_its_field(supervisor, facts):
    run = charge_unknown()
    effect = _charge(run)

    response = supervisor.post(
        change_url(effect),
        {
            "status": "confirmed",
            "external_id": "c" * 300,
            "error": "",
            "reason": "r",
            "_save": "Save",
        },
    )

    page = response.content.decode()
    assert response.status_code == 200
    assert "at most 128 characters" in page
    assert "needs the external id it produced" not in page
    assert _charge(run).status == Effect.Status.UNKNOWN
    assert edits(run) == []


def test_ledger_edit_of_an_active_run_is_refused(supervisor, facts):
    run = engine.start_run("content", {}, actor="test", enqueue=False)
    token = leases.acquire(run.pk, "worker:test")
    effect = record_intent(
        Writer(run.pk, token, "worker:test"),
        {
            "delivery_key": "d" * 64,
            "run": run,
            "stage": "visual",
            "call_id": "upload-cover",
            "tool": "upload_asset",
            "policy": "IDEMPOTENT",
            "target": "acct-42@assets",
            "request_hash": "r" * 64,
            "request": {},
        },
        event=called(
            stage="visual", call="upload-cover", tool="upload_asset", idempotency_key="d" * 64
        ),
    )
    response = supervisor.post(
        change_url(effect),
        {"status": "failed", "external_id": "", "error": "", "reason": "r", "_save": "Save"},
    )
    assert response.status_code == 200
    assert "a worker owns its ledger" in response.content.decode()
    effect.refresh_from_db()
    assert effect.status == Effect.Status.INTENT
    assert edits(run) == []


def test_effect_list_filters_and_search(supervisor, facts):
    run = charge_unknown()
    effect = _charge(run)
    base = reverse("admin:runs_effect_changelist")
    confirmed = Effect.objects.filter(run=run, status=Effect.Status.CONFIRMED).first()
    for query, expected in [
        (f"q={effect.delivery_key[:12]}", effect),
        (f"q={confirmed.external_id}", confirmed),
        ("status=unknown", effect),
        ("policy=NEVER", effect),
        (f"run={run.pk}", effect),
        (f"run={run.public_id}", effect),
        (f"target={effect.target}", effect),
    ]:
        response = supervisor.get(f"{base}?{query}")
        assert response.status_code == 200, query
        assert change_url(expected) in response.content.decode(), query


def test_run_admin_search_accepts_public_ids(supervisor, facts):
    run = charge_unknown()
    base = reverse("admin:runs_run_changelist")
    assert change_url(run) in supervisor.get(f"{base}?q={run.public_id}").content.decode()
    assert supervisor.get(f"{base}?q=not-a-run").status_code == 200
    events = reverse("admin:runs_event_changelist")
    assert supervisor.get(f"{events}?q={run.public_id}").status_code == 200


# --- the queue admin (django-rq) -------------------------------------------------------------

RQ = "/admin/rq/"
JOB = "probe-job"


@pytest.fixture
def queued(redis_conn) -> tuple[Job, Worker]:
    """A real job in the real queue, and a real worker registered beside it (not started)."""
    # Enqueued now, not when the test's transaction would commit.
    queue = django_rq.get_queue(settings.RESUMER_QUEUE, commit_mode="auto")
    job = queue.enqueue("runs.jobs.execute_stage", 1, "draft", "ticket", job_id=JOB)
    worker = Worker([queue], connection=redis_conn, name="probe-worker")
    worker.register_birth()
    return job, worker


@pytest.fixture
def demoted(db) -> Client:
    """A supervisor whose group was taken away: still staff, no role."""
    user, _ = roles.ensure_user("demoted", "demoted-demo-pass", roles.SUPERVISOR)
    user.groups.clear()
    client = Client()
    client.force_login(user)
    return client


def queue_pages(worker: Worker) -> list[str]:
    """Every page django-rq serves for a queue that exists, its job and its worker."""
    return [
        RQ,
        f"{RQ}stats.json",
        *(
            f"{RQ}queues/0/{page}"
            for page in [
                "",
                "details/",
                "finished/",
                "failed/",
                "failed/clear/",
                "scheduled/",
                "started/",
                "deferred/",
                "empty/",
                "requeue-all/",
                f"{JOB}/",
                f"{JOB}/delete/",
                f"{JOB}/requeue/",
                f"{JOB}/enqueue/",
            ]
        ),
        f"{RQ}workers/0/",
        f"{RQ}workers/0/{worker.key}/",
    ]


QUEUE_ACTIONS = [
    (f"{RQ}queues/0/{JOB}/delete/", {}),
    (f"{RQ}queues/0/{JOB}/requeue/", {}),
    (f"{RQ}queues/0/{JOB}/enqueue/", {}),
    (f"{RQ}queues/0/{JOB}/stop/", {}),
    (f"{RQ}queues/0/empty/", {}),
    (f"{RQ}queues/0/failed/clear/", {}),
    (f"{RQ}queues/0/requeue-all/", {}),
    (f"{RQ}queues/confirm-action/0/", {"action": "delete", "_selected_action": JOB}),
    (f"{RQ}queues/actions/0/", {"action": "delete", "job_ids": JOB}),
]


def test_supervisors_reach_every_queue_page(supervisor, queued):
    _, worker = queued
    for path in queue_pages(worker):
        assert supervisor.get(path).status_code == 200, path


def test_staff_without_the_supervisor_role_gets_403_on_every_queue_page(demoted, queued):
    _, worker = queued
    for path in queue_pages(worker):
        response = demoted.get(path)
        assert response.status_code == 403, path
        assert JOB.encode() not in response.content, path


@pytest.mark.parametrize(("path", "data"), QUEUE_ACTIONS)
def test_staff_without_the_supervisor_role_cannot_act_on_the_queue(demoted, queued, path, data):
    job, _ = queued
    assert demoted.post(path, data).status_code == 403
    assert Job.exists(JOB, connection=job.connection)
    assert job.get_status(refresh=True) == "queued"
    assert django_rq.get_queue(settings.RESUMER_QUEUE).job_ids == [JOB]


@pytest.mark.parametrize("role", [None, roles.VIEWER, roles.OPERATOR])
def test_users_who_are_not_staff_are_sent_to_the_admin_login(users, queued, role):
    _, worker = queued
    client = Client()
    if role is not None:
        client.force_login(users[role])
    for path in queue_pages(worker):
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/admin/login/"), path
    for path, data in QUEUE_ACTIONS:
        assert client.post(path, data).status_code == 302, path
    assert Job.exists(JOB, connection=queued[0].connection)


@pytest.mark.parametrize(
    ("method", "path", "data"),
    [
        ("get", f"{RQ}queues/99/", {}),
        ("get", f"{RQ}queues/0/nonexistent-job/requeue/", {}),
        ("get", f"{RQ}queues/0/nonexistent-job/delete/", {}),
        ("get", f"{RQ}queues/0/nonexistent-job/enqueue/", {}),
        ("get", f"{RQ}workers/0/nonexistent/", {}),
        ("get", f"{RQ}workers/0/rq:worker:nonexistent/", {}),
        ("get", f"{RQ}schedulers/5/", {}),
        ("get", f"{RQ}schedulers/0/", {}),
        ("post", f"{RQ}queues/actions/0/", {"action": "delete", "job_ids": "nonexistent-job"}),
        ("post", f"{RQ}queues/actions/0/", {"action": "delete", "job_ids": [JOB, "nonexistent"]}),
        ("post", f"{RQ}queues/0/nonexistent-job/delete/", {}),
        ("post", f"{RQ}queues/99/empty/", {}),
    ],
)
def test_queue_pages_answer_404_for_ids_that_name_nothing(supervisor, queued, method, path, data):
    response = getattr(supervisor, method)(path, data)
    assert response.status_code == 404
    # A refused bulk action touched none of the jobs it named.
    assert Job.exists(JOB, connection=queued[0].connection)


def test_django_rq_is_mounted_only_behind_the_role_check(supervisor):
    assert supervisor.get("/admin/django_rq/dashboard/").status_code == 404


def test_the_queue_link_is_shown_to_supervisors_only(supervisor, demoted):
    assert RQ in supervisor.get("/admin/").content.decode()
    assert RQ in supervisor.get("/runs/").content.decode()
    assert RQ not in demoted.get("/admin/").content.decode()


def test_an_edit_waits_a_moment_for_a_lease_then_refuses_and_writes_nothing(facts, monkeypatch):
    import runs.ledger.edits

    run = charge_unknown()
    effect = _charge(run)
    leases.acquire(run.pk, "worker:elsewhere")  # held, and not about to be released
    monkeypatch.setattr(runs.ledger.edits, "EDIT_LEASE_WAIT", 0.2)

    with pytest.raises(LedgerError, match="leased by a worker right now"):
        edit_effect(effect.pk, {"status": "failed"}, reason="no charge", actor="user:s")

    assert edits(run) == [] and _charge(run).status == effect.status

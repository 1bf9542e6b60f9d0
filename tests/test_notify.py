"""Notifications: runs that need a human are announced by a signed webhook and an email,
sent by RQ jobs with retries, logged attempt by attempt, and batched when many runs stop
together.

The targets are real: an HTTP server in a thread of this process (it records every request)
and an SMTP server (aiosmtpd). Runs stop the way they do in production, by a worker's
sweeper finding their queued job gone from Redis, and the messages are sent by real
`rqworker` processes.
"""

from __future__ import annotations

import email
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from redis import Redis
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from runs import engine, enqueue, notify
from runs.access import roles
from runs.events import Failed
from runs.execution import sweeper
from runs.ledger import leases
from runs.ledger.append import RunMove, Writer, append
from runs.models import Delivery, Event, Notification, NotificationRun, Run
from tests.support.processes import free_port, wait_for

SECRET = "test-webhook-secret"
PUBLIC_URL = "http://resumer.test"
EMAILS = ["ops@example.com", "oncall@example.com"]


# --- the outside world -----------------------------------------------------------------------


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict:
        return json.loads(self.body)


class WebhookReceiver(ThreadingHTTPServer):
    """A real HTTP server that records each POST and answers with `status`."""

    def __init__(self, status: int = 200) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.status = status
        self.received: list[Received] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks/resumer"


class _Handler(BaseHTTPRequestHandler):
    server: WebhookReceiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append(Received(dict(self.headers.items()), body))
        self.send_response(self.server.status)
        self.end_headers()
        self.wfile.write(b"ok" if self.server.status < 300 else b"receiver failing")

    def log_message(self, *args) -> None:
        pass


class SMTPInbox:
    """aiosmtpd handler: keeps every message it accepts."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.messages: list[email.message.Message] = []
        self.recipients: list[list[str]] = []

    async def handle_DATA(self, server, session, envelope) -> str:
        self.recipients.append(list(envelope.rcpt_tos))
        self.messages.append(email.message_from_bytes(envelope.content))
        return "250 Message accepted for delivery"


@dataclass
class Targets:
    webhook: WebhookReceiver
    smtp: SMTPInbox


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def smtp() -> Iterator[SMTPInbox]:
    inbox = SMTPInbox(free_port())
    controller = Controller(inbox, hostname="127.0.0.1", port=inbox.port)
    controller.start()
    yield inbox
    controller.stop()


NOTIFY_ENV = (
    "RESUMER_PUBLIC_URL",
    "RESUMER_WEBHOOK_URL",
    "RESUMER_WEBHOOK_SECRET",
    "RESUMER_NOTIFY_EMAILS",
    "RESUMER_NOTIFY_WINDOW",
    "RESUMER_NOTIFY_BACKOFF",
    "EMAIL_BACKEND",
    "EMAIL_HOST",
    "EMAIL_PORT",
)


def configure(monkeypatch, settings, **values: str) -> None:
    """The same notification settings for this process (settings) and for the workers it
    starts (their environment is this one's); what is not given is unset."""
    for name in NOTIFY_ENV:
        if name in values:
            monkeypatch.setenv(name, values[name])
        else:
            monkeypatch.delenv(name, raising=False)
    settings.RESUMER_PUBLIC_URL = values.get("RESUMER_PUBLIC_URL", PUBLIC_URL)
    settings.RESUMER_WEBHOOK_URL = values.get("RESUMER_WEBHOOK_URL", "")
    settings.RESUMER_WEBHOOK_SECRET = values.get("RESUMER_WEBHOOK_SECRET", "")
    emails = values.get("RESUMER_NOTIFY_EMAILS", "")
    settings.RESUMER_NOTIFY_EMAILS = [a for a in emails.split(",") if a]
    settings.RESUMER_NOTIFY_WINDOW = float(values.get("RESUMER_NOTIFY_WINDOW", "30"))
    backoff = values.get("RESUMER_NOTIFY_BACKOFF", "")
    settings.RESUMER_NOTIFY_BACKOFF = [int(v) for v in backoff.split(",") if v]
    if "EMAIL_HOST" in values:
        settings.EMAIL_BACKEND = values["EMAIL_BACKEND"]
        settings.EMAIL_HOST = values["EMAIL_HOST"]
        settings.EMAIL_PORT = int(values["EMAIL_PORT"])


@pytest.fixture
def targets(monkeypatch, settings, receiver, smtp) -> Targets:
    """A webhook and two email addresses, a one-second window, retries after 1 s and 1 s."""
    env = {
        "RESUMER_PUBLIC_URL": PUBLIC_URL,
        "RESUMER_WEBHOOK_URL": receiver.url,
        "RESUMER_WEBHOOK_SECRET": SECRET,
        "RESUMER_NOTIFY_EMAILS": ",".join(EMAILS),
        "RESUMER_NOTIFY_WINDOW": "1",
        "RESUMER_NOTIFY_BACKOFF": "1,1",
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp.port),
    }
    configure(monkeypatch, settings, **env)
    return Targets(receiver, smtp)


def valid_signature(received: Received) -> bool:
    """The documented scheme, computed here independently of runs/notify.py."""
    timestamp = received.headers["X-Resumer-Timestamp"]
    expected = hmac.new(
        SECRET.encode(), timestamp.encode() + b"." + received.body, hashlib.sha256
    ).hexdigest()
    fresh = abs(time.time() - int(timestamp)) <= 300
    return fresh and hmac.compare_digest(
        received.headers["X-Resumer-Signature"], f"sha256={expected}"
    )


# --- runs ----------------------------------------------------------------------------------


def queued_runs(count: int) -> list[Run]:
    """Runs whose first stage job is on the queue, as start_run leaves them."""
    return [engine.start_run("content", {}, actor="test") for _ in range(count)]


def interrupted_here() -> Run:
    """A run interrupted by a sweep in this process (its worker vanished before it started)."""
    run = engine.start_run("content", {}, actor="test", enqueue=False)
    assert sweeper.interrupt(sweeper.Finding(run.pk, "test: worker vanished", {}), takeover=True)
    return run


def deliveries(channel: str) -> list[Delivery]:
    return list(Delivery.objects.filter(channel=channel).order_by("attempt"))


# --- end to end, with workers ----------------------------------------------------------------


def test_an_interrupted_run_sends_one_signed_webhook_and_one_email(workers, redis_conn, targets):
    (run,) = queued_runs(1)
    redis_conn.flushdb()  # Redis restarted without persistence: the queued job is gone
    workers.start()
    wait_for(lambda: Delivery.objects.filter(ok=True).count() == 2, what="both deliveries")

    notification = Notification.objects.get()
    assert notification.state == Notification.State.QUEUED
    member = NotificationRun.objects.get(notification=notification)
    assert (member.run_id, member.reason) == (run.pk, Run.Status.INTERRUPTED)
    assert member.seq == Event.objects.get(run=run, type=Event.Type.INTERRUPTED).seq

    (hook,) = targets.webhook.received
    assert valid_signature(hook)
    link = f"{PUBLIC_URL}/runs/{run.public_id}/"
    assert hook.json["count"] == 1
    assert hook.json["url"] == link
    assert f"<{link}|Open {run.public_id}>" in hook.json["text"]
    assert "interrupted" in hook.json["text"]
    assert hook.headers["X-Resumer-Delivery"] == str(notification.pk)

    (message,) = targets.smtp.messages
    assert sorted(targets.smtp.recipients[0]) == sorted(EMAILS)
    assert run.public_id in message["Subject"]
    assert link in message.get_payload(decode=True).decode()

    (webhook,) = deliveries(Delivery.Channel.WEBHOOK)
    assert (webhook.attempt, webhook.status_code, webhook.error) == (1, 200, "")
    assert webhook.target == "http://" + targets.webhook.url.split("/")[2] + "/…"
    (mail,) = deliveries(Delivery.Channel.EMAIL)
    assert (mail.attempt, mail.ok, mail.target) == (1, True, ", ".join(EMAILS))


def test_a_failing_receiver_is_retried_with_backoff_and_every_attempt_is_logged(
    workers, redis_conn, receiver, monkeypatch, settings
):
    receiver.status = 500
    configure(
        monkeypatch,
        settings,
        RESUMER_WEBHOOK_URL=receiver.url,
        RESUMER_WEBHOOK_SECRET=SECRET,
        RESUMER_NOTIFY_WINDOW="0",
        RESUMER_NOTIFY_BACKOFF="1,1",
    )
    (run,) = queued_runs(1)
    redis_conn.flushdb()
    workers.start()
    notification = wait_for(lambda: Notification.objects.first(), what="a notification")
    job_id = f"notify-{notification.pk}-webhook"

    def given_up() -> bool:
        # The job may not be in Redis yet: the sweeper queues it just after the state moves.
        try:
            return Job.fetch(job_id, connection=redis_conn).get_status() == JobStatus.FAILED
        except NoSuchJobError:
            return False

    wait_for(given_up, what="RQ to give up after the last retry")

    logged = deliveries(Delivery.Channel.WEBHOOK)
    assert [d.attempt for d in logged] == [1, 2, 3]
    assert {(d.ok, d.status_code) for d in logged} == {(False, 500)}
    assert all("HTTP 500" in d.error for d in logged)
    assert [r.headers["X-Resumer-Attempt"] for r in receiver.received] == ["1", "2", "3"]
    assert all(valid_signature(r) for r in receiver.received)
    # The backoff the retries waited out, as RQ holds it for the job.
    assert Job.fetch(job_id, connection=redis_conn).retry_intervals == [1, 1]
    assert not Delivery.objects.filter(channel=Delivery.Channel.EMAIL).exists()


def test_twenty_runs_stopping_in_one_window_send_one_message_counting_twenty(
    workers, redis_conn, targets, monkeypatch, settings
):
    runs = queued_runs(20)
    redis_conn.flushdb()  # an outage: every queued job is gone
    # Two workers whose sweepers interrupt the runs side by side, with a window longer than
    # this test: whatever the machine's speed, all twenty stop inside it.
    monkeypatch.setenv("RESUMER_NOTIFY_WINDOW", "3600")
    workers.start()
    workers.start()
    wait_for(lambda: NotificationRun.objects.count() == 20, timeout=120, what="20 runs joined")
    assert Notification.objects.get().state == Notification.State.OPEN
    # The window ends: a worker with a one-second window closes it and sends.
    workers.stop_all()
    monkeypatch.setenv("RESUMER_NOTIFY_WINDOW", "1")
    workers.start()
    wait_for(lambda: Delivery.objects.filter(ok=True).count() == 2, what="both deliveries")

    notification = Notification.objects.get()
    assert set(notification.runs.values_list("run_id", flat=True)) == {r.pk for r in runs}
    (hook,) = targets.webhook.received
    assert valid_signature(hook)
    group = f"{PUBLIC_URL}/runs/?notice={notification.pk}"
    assert hook.json["count"] == 20
    assert hook.json["reasons"] == {"interrupted": 20}
    assert hook.json["url"] == group
    assert "20 runs" in hook.json["text"] and f"<{group}|Open the 20 runs>" in hook.json["text"]
    (message,) = targets.smtp.messages
    assert "20 runs" in message["Subject"]
    assert group in message.get_payload(decode=True).decode()


# --- joining and closing, in this process ----------------------------------------------------


@pytest.fixture
def webhook_only(monkeypatch, settings) -> None:
    """A webhook target nobody listens to: these tests stop before anything is sent."""
    configure(
        monkeypatch,
        settings,
        RESUMER_WEBHOOK_URL=f"http://127.0.0.1:{free_port()}/",
        RESUMER_WEBHOOK_SECRET=SECRET,
        RESUMER_NOTIFY_WINDOW="0",
    )


def test_with_no_target_configured_nothing_is_recorded_or_queued(
    transactional_db, facts, redis_conn, monkeypatch, settings
):
    configure(monkeypatch, settings)
    interrupted_here()
    assert notify.close_due() == []
    assert not Notification.objects.exists()
    # The stop queued its plan job; nothing was queued to deliver a notification.
    queued = [job.func_name for job in enqueue.queue().jobs]
    assert not [name for name in queued if name.endswith("deliver_notification")], queued


def test_a_rolled_back_append_notifies_nobody(transactional_db, facts, webhook_only):
    run = engine.start_run("content", {}, actor="test", enqueue=False)
    writer = Writer(run.pk, leases.acquire(run.pk, "test"), "test")
    with pytest.raises(RuntimeError), transaction.atomic():
        append(writer, Failed(stage="research", error="boom"), move=RunMove(Run.Status.FAILED))
        raise RuntimeError("the caller's transaction fails after the append")
    assert not NotificationRun.objects.exists()


def test_only_a_move_into_a_status_that_needs_a_human_is_news():
    assert notify.trigger("INTERRUPTED", "running", "interrupted") == "interrupted"
    assert notify.trigger("NEEDS_APPROVAL", "running", "needs_approval") == "needs_approval"
    assert notify.trigger("FAILED", "running", "failed") == "failed"
    assert notify.trigger("VERIFIED", "running", "running") is None
    assert notify.trigger("LEDGER_EDITED", "failed", None) is None
    # Already there: appending with the same status again is not a second stop.
    assert notify.trigger("FAILED", "failed", "failed") is None


def test_runs_joining_from_many_connections_at_once_share_one_notification(
    transactional_db, facts, webhook_only
):
    run_pks = [engine.start_run("content", {}, actor="test", enqueue=False).pk for _ in range(8)]
    start = threading.Barrier(len(run_pks))
    errors: list[BaseException] = []

    def stop(run_pk: int) -> None:
        try:
            start.wait(timeout=60)
            notify.join(run_pk, 2, Run.Status.INTERRUPTED)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=stop, args=(pk,)) for pk in run_pks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    notification = Notification.objects.get()
    assert sorted(notification.runs.values_list("run_id", flat=True)) == sorted(run_pks)


def test_a_run_stopping_after_the_window_closed_opens_the_next_notification(
    transactional_db, facts, redis_conn, webhook_only
):
    first = interrupted_here()
    (closed,) = notify.close_due()
    second = interrupted_here()

    assert Notification.objects.get(pk=closed).state == Notification.State.QUEUED
    assert list(
        NotificationRun.objects.filter(notification=closed).values_list("run_id", flat=True)
    ) == [first.pk]
    opened = Notification.objects.get(state=Notification.State.OPEN)
    assert list(opened.runs.values_list("run_id", flat=True)) == [second.pk]


def test_redis_refusing_the_jobs_leaves_the_notification_to_the_next_sweep(
    transactional_db, facts, redis_conn, webhook_only
):
    interrupted_here()
    nowhere = Queue("default", connection=Redis(port=free_port(), socket_connect_timeout=1))
    assert notify.close_due(nowhere) == []
    notification = Notification.objects.get()
    assert (notification.state, notification.queued_at) == (Notification.State.CLOSED, None)

    assert notify.close_due() == [notification.pk]
    notification.refresh_from_db()
    assert notification.state == Notification.State.QUEUED
    # (beside the plan job the stop queued)
    queued = [i for i in enqueue.queue().job_ids if i.startswith("notify-")]
    assert queued == [f"notify-{notification.pk}-webhook"]


def test_the_signature_helper_refuses_a_changed_body_and_an_old_timestamp():
    body = b'{"text": "hello"}'
    now = int(time.time())
    header = notify.signature(SECRET, str(now), body)
    assert notify.verify_signature(SECRET, str(now), body, header)
    assert not notify.verify_signature(SECRET, str(now), body + b" ", header)
    assert not notify.verify_signature("another-secret", str(now), body, header)
    old = str(now - 3600)
    assert not notify.verify_signature(SECRET, old, body, notify.signature(SECRET, old, body))


# --- the dashboard and the admin -------------------------------------------------------------


def test_the_group_link_shows_the_inbox_filtered_to_the_notifications_runs(
    transactional_db, facts, redis_conn, webhook_only
):
    grouped = [interrupted_here() for _ in range(3)]
    notify.close_due()
    outside = interrupted_here()  # the next notification's
    viewer, _ = roles.ensure_user("viewer", "viewer-demo-pass", roles.VIEWER)
    client = Client()
    client.force_login(viewer)

    notification = grouped[0].notices.get().notification
    page = client.get(f"/runs/?notice={notification.pk}").content.decode()
    assert all(f">{run.public_id}<" in page for run in grouped)
    assert f">{outside.public_id}<" not in page


def test_the_delivery_log_is_read_only_and_for_supervisors_only(db):
    notification = Notification.objects.create()
    logged = Delivery.objects.create(
        notification=notification,
        channel=Delivery.Channel.WEBHOOK,
        target="https://hooks.example.com/…",
        attempt=1,
        ok=False,
        status_code=500,
        error="HTTP 500",
    )
    supervisor, _ = roles.ensure_user("supervisor", "x", roles.SUPERVISOR)
    staff_viewer, _ = roles.ensure_user("viewer", "x", roles.VIEWER)
    User.objects.filter(pk=staff_viewer.pk).update(is_staff=True)
    staff_viewer.refresh_from_db()

    boss = Client()
    boss.force_login(supervisor)
    assert boss.get("/admin/runs/delivery/").status_code == 200
    assert boss.get("/admin/runs/notification/").status_code == 200
    assert boss.get(f"/admin/runs/notification/{notification.pk}/change/").status_code == 200
    assert boss.get("/admin/runs/delivery/add/").status_code == 403
    assert boss.post(f"/admin/runs/delivery/{logged.pk}/delete/").status_code == 403

    other = Client()
    other.force_login(staff_viewer)
    assert other.get("/admin/runs/run/").status_code == 200
    assert other.get("/admin/runs/delivery/").status_code == 403
    assert Delivery.objects.count() == 1

"""An operator asks a supervisor to settle a blocked effect from its page (runs/asks.py): who
asked is recorded, and the supervisors are told through the notifications Resumer already
sends, by the same path as a stopped run: a real webhook receiver and SMTP server, a real
worker's sweeper closing the window and real RQ jobs delivering (tests/test_notify.py)."""

from __future__ import annotations

import pytest

from runs.ledger.edits import edit_effect
from runs.models import Delivery, Effect, Notification, NotificationRun, SupervisorAsk
from tests.support.plans import charge_unknown
from tests.support.processes import wait_for
from tests.support.web import client_as
from tests.test_notify import (  # noqa: F401 (fixtures)
    EMAILS,
    PUBLIC_URL,
    SECRET,
    configure,
    receiver,
    smtp,
    valid_signature,
)


def ask_url(effect: Effect) -> str:
    return f"/runs/run-{effect.run_id}/effects/{effect.pk}/ask-supervisor/"


def blocked_charge() -> Effect:
    return Effect.objects.get(run=charge_unknown(), call_id="promote-charge")


def test_an_operator_asks_a_supervisor_and_the_notification_names_who_and_which_effect(
    workers,
    redis_conn,
    receiver,  # noqa: F811
    smtp,  # noqa: F811
    monkeypatch,
    settings,
):
    configure(monkeypatch, settings)  # the stop itself tells nobody: only the ask does
    effect = blocked_charge()
    configure(
        monkeypatch,
        settings,
        RESUMER_PUBLIC_URL=PUBLIC_URL,
        RESUMER_WEBHOOK_URL=receiver.url,
        RESUMER_WEBHOOK_SECRET=SECRET,
        RESUMER_NOTIFY_EMAILS=",".join(EMAILS),
        RESUMER_NOTIFY_WINDOW="1",
        EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
        EMAIL_HOST="127.0.0.1",
        EMAIL_PORT=str(smtp.port),
    )

    response = client_as("operator").post(ask_url(effect))

    assert response.status_code == 302
    ask = SupervisorAsk.objects.get()
    assert (ask.effect_id, ask.asked_by) == (effect.pk, "user:operator")
    member = NotificationRun.objects.get(notification=ask.notification)
    assert (member.run_id, member.reason) == (effect.run_id, "asked_for_a_supervisor")
    workers.start()  # its sweeper closes the window; RQ jobs deliver
    wait_for(lambda: Delivery.objects.filter(ok=True).count() == 2, what="both deliveries")
    (hook,) = receiver.received
    assert valid_signature(hook)
    link = f"{PUBLIC_URL}/runs/run-{effect.run_id}/effects/{effect.pk}/"
    said = "user:operator asks a supervisor to settle charge_card (publish/promote-charge)"
    assert hook.json["asks"][0]["url"] == link and said in hook.json["text"]
    (message,) = smtp.messages
    assert f"{said} of run-{effect.run_id}: {link}" in message.get_payload(decode=True).decode()


def test_without_a_notification_target_the_ask_is_recorded_and_the_page_says_nobody_was_told(
    transactional_db, facts, monkeypatch, settings
):
    configure(monkeypatch, settings)
    effect = blocked_charge()

    page = client_as("operator").post(ask_url(effect), follow=True).content.decode()

    assert SupervisorAsk.objects.get().notification is None
    assert not Notification.objects.exists()
    assert "nobody was told" in page and "user:operator asked a supervisor" in page


@pytest.mark.django_db
def test_a_viewer_may_not_ask_and_a_settled_effect_is_not_asked_about(facts):
    effect = blocked_charge()
    assert client_as("viewer").post(ask_url(effect)).status_code == 403
    edit_effect(effect.pk, {"status": "confirmed", "external_id": "ch-1"}, reason="r", actor="t")

    page = client_as("operator").post(ask_url(effect), follow=True).content.decode()

    assert "Not asked: the ledger holds charge_card (publish/promote-charge) confirmed" in page
    assert not SupervisorAsk.objects.exists()

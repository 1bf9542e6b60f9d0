"""POST /api/v1/runs/{run}/effects/{effect}/ask-supervisor: an operator's token asks a
supervisor to settle the effect a plan is blocked on, as the effect page's button does
(runs/asks.py); refusals are problems (403 a viewer, 404 an effect of another run, 409 a
settled effect) and record and send nothing."""

from __future__ import annotations

import pytest

from runs.ledger.edits import edit_effect
from runs.models import Effect, NotificationRun, SupervisorAsk
from tests.api.conftest import is_problem
from tests.support.plans import charge_unknown

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def blocked(facts) -> Effect:
    """The charge a content run made at the card processor whose answer never came."""
    return Effect.objects.get(run=charge_unknown(), call_id="promote-charge")


def ask_path(effect: Effect, run_pk: int | None = None) -> str:
    return f"/runs/run-{run_pk or effect.run_id}/effects/{effect.pk}/ask-supervisor"


def test_an_operators_token_asks_and_is_told_nobody_hears_without_a_target(operator, blocked):
    response = operator.post(ask_path(blocked))

    assert response.status_code == 200, response.content
    ask = SupervisorAsk.objects.get()
    assert (ask.effect_id, ask.asked_by) == (blocked.pk, f"user:{operator.user.username}")
    body = response.json()
    assert (body["run"], body["effect"], body["tool"]) == (
        f"run-{blocked.run_id}",
        blocked.pk,
        "charge_card",
    )
    assert (body["notification"], body["told"]) == (None, False)


def test_with_a_webhook_configured_the_ask_joins_the_runs_notification(operator, blocked, settings):
    settings.RESUMER_WEBHOOK_URL = "http://127.0.0.1:9/hook"

    body = operator.post(ask_path(blocked)).json()

    ask = SupervisorAsk.objects.get()
    assert (body["notification"], body["told"]) == (ask.notification_id, True)
    member = NotificationRun.objects.get(notification_id=body["notification"])
    assert (member.run_id, member.reason) == (blocked.run_id, "asked_for_a_supervisor")


def test_a_viewers_token_may_not_ask(viewer, blocked):
    is_problem(viewer.post(ask_path(blocked)), 403)
    assert not SupervisorAsk.objects.exists()


def test_an_effect_asked_about_under_another_run_is_a_404(operator, blocked):
    other = charge_unknown()

    problem = is_problem(operator.post(ask_path(blocked, run_pk=other.pk)), 404)

    assert f"run-{other.pk} has no effect {blocked.pk}" in problem["detail"]
    assert not SupervisorAsk.objects.exists()


def test_a_settled_effect_is_a_409_and_nothing_is_recorded(operator, blocked):
    edit_effect(blocked.pk, {"status": "confirmed", "external_id": "ch-1"}, reason="r", actor="t")

    problem = is_problem(operator.post(ask_path(blocked)), 409)

    assert "there is nothing to settle" in problem["detail"]
    assert not SupervisorAsk.objects.exists()


def test_the_same_idempotency_key_asks_once(operator, blocked):
    first = operator.post(ask_path(blocked), key="ask-1")
    again = operator.post(ask_path(blocked), key="ask-1")

    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json() == first.json()
    assert SupervisorAsk.objects.count() == 1


def test_an_ask_with_a_field_is_a_422_and_asks_nothing(operator, blocked):
    is_problem(operator.post(ask_path(blocked), {"reason": "please"}), 422)

    assert not SupervisorAsk.objects.exists()


def test_an_ask_with_no_body_at_all_is_taken(operator, blocked):
    response = operator.post(ask_path(blocked), raw=b"")

    assert response.status_code == 200, response.content
    assert SupervisorAsk.objects.get().effect_id == blocked.pk

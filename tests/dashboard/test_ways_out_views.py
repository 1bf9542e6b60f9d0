"""The run page's ways out of a failed answer: a confirmed charge its target refused offers
Ask again (and says what the target said, never that a supervisor recorded anything), the
gate it reopens shows the refused attempt; any stopped run can be closed out with a reason,
after which its page says who closed it, why, and what stays unsettled. Refusals are 4xx and
write nothing. Runs are executed in this process (seed_demo.run_inline)."""

from __future__ import annotations

import pytest

from runs import engine
from runs.models import Event, Gate, GateStatus, Run
from runs.planning import stored_plans
from tests.gates import pipelines as gp
from tests.support.pipelines import registered
from tests.support.refusals import refused_charge, sent_back_review, unknown_charge, waiting_charge
from tests.support.web import client_as

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def gate_pipelines(settings, demo_service, redis_conn):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.RESUMER_LEASE_TTL = 120
    with registered(settings, *gp.PATHS):
        yield


def page_of(client, run: Run) -> str:
    response = client.get(f"/runs/{run.public_id}/")
    assert response.status_code == 200
    return response.content.decode()


def events(run: Run, kind: str) -> int:
    return Event.objects.filter(run=run, type=kind).count()


# --- Ask again -------------------------------------------------------------------------------


def test_a_refused_charge_offers_ask_again_and_says_what_the_target_said():
    run = refused_charge()
    stored_plans.refresh(run)

    page = page_of(client_as("operator"), run)

    assert f'action="/runs/{run.public_id}/ask-again/"' in page
    assert "card declined" in page and "sam approved it with" in page
    assert "ask again or close the run out" in page
    assert "supervisor recorded" not in page
    plan = client_as("operator").get(f"/runs/{run.public_id}/plan/").content.decode()
    assert f'action="/runs/{run.public_id}/ask-again/"' in plan
    assert "supervisor recorded" not in plan


def test_a_viewer_reads_the_refusal_but_is_offered_no_button():
    run = refused_charge()

    page = page_of(client_as("viewer"), run)

    assert "card declined" in page and "/ask-again/" not in page
    refused = client_as("viewer").post(f"/runs/{run.public_id}/ask-again/", {"gate": "1"})
    assert refused.status_code == 403
    assert events(run, Event.Type.GATE_REOPENED) == 0


def test_ask_again_reopens_the_gate_whose_page_shows_the_refused_attempt():
    run = refused_charge()
    gate = Gate.objects.get(run=run, gate_id="fee")

    response = client_as("operator").post(
        f"/runs/{run.public_id}/ask-again/", {"gate": str(gate.pk)}, follow=True
    )

    assert response.redirect_chain[-1][0] == f"/runs/{run.public_id}/gates/{gate.pk}/"
    page = response.content.decode()
    assert "Refused before: asked again" in page and "card declined" in page
    assert "GATE_REOPENED" in page
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN
    assert Run.objects.get(pk=run.pk).status == Run.Status.WAITING


def test_a_sent_back_review_offers_ask_again_and_its_gate_page_shows_the_answer(facts):
    run = sent_back_review(notes="too short")
    stored_plans.refresh(run)
    gate = Gate.objects.get(run=run, gate_id="review")

    page = page_of(client_as("operator"), run)

    assert "user:ana sent the work back (<q>too short</q>)" in page
    assert f'<input type="hidden" name="gate" value="{gate.pk}">' in page
    response = client_as("operator").post(
        f"/runs/{run.public_id}/ask-again/", {"gate": str(gate.pk)}, follow=True
    )
    reopened = response.content.decode()
    assert "Sent back before: asked again" in reopened and "<q>too short</q>" in reopened
    assert Gate.objects.get(pk=gate.pk).status == GateStatus.OPEN


def test_the_inbox_offers_no_resume_of_a_sent_back_run_and_points_to_its_page(facts):
    run = sent_back_review(notes="too short")
    stored_plans.refresh(run)

    html = client_as("operator").get("/runs/").content.decode()
    row = html[html.index(f'href="/runs/{run.public_id}/"') :].split("</tr>")[0]

    assert "No resume offered" in row and f"/runs/{run.public_id}/#decision" in row
    assert "Resume:" not in row


def test_ask_again_where_nothing_was_refused_is_a_409_and_writes_nothing():
    gate = waiting_charge()
    run = gate.run

    response = client_as("operator").post(f"/runs/{run.public_id}/ask-again/", {"gate": gate.pk})

    assert response.status_code == 409
    assert "Not asked:" in response.content.decode()
    assert events(run, Event.Type.GATE_REOPENED) == 0


def test_ask_again_without_a_gate_is_a_400():
    run = refused_charge()

    response = client_as("operator").post(f"/runs/{run.public_id}/ask-again/", {"gate": "x"})

    assert response.status_code == 400
    assert events(run, Event.Type.GATE_REOPENED) == 0


# --- Close out -------------------------------------------------------------------------------


def test_an_operator_closes_a_stopped_run_out_from_its_page():
    run = refused_charge()
    operator = client_as("operator")
    assert f'action="/runs/{run.public_id}/close/"' in page_of(operator, run)

    response = operator.post(
        f"/runs/{run.public_id}/close/", {"reason": "over the card's limit"}, follow=True
    )

    page = response.content.decode()
    assert "is closed out (event #" in page
    assert "Closed out</strong> by user:operator" in page and "over the card&#x27;s limit" in page
    assert f'action="/runs/{run.public_id}/close/"' not in page
    assert Run.objects.get(pk=run.pk).status == Run.Status.CLOSED


def test_a_closed_run_says_its_unsettled_effects_stay_unsettled():
    run = unknown_charge()

    client_as("operator").post(f"/runs/{run.public_id}/close/", {"reason": "gave up"})

    page = page_of(client_as("viewer"), run)
    assert "Closing settled nothing outside: charge_card (pay/fee) stays unknown" in page


def test_closing_a_run_with_one_unsettled_effect_says_it_stays_unsettled():
    run = unknown_charge()

    response = client_as("operator").post(
        f"/runs/{run.public_id}/close/", {"reason": "gave up"}, follow=True
    )

    said = " ".join(str(m) for m in response.context["messages"])
    assert "1 effect stays unsettled: closing settles nothing outside." in said


def test_a_close_out_without_a_reason_is_a_400_form_error_and_writes_nothing():
    run = refused_charge()

    response = client_as("operator").post(f"/runs/{run.public_id}/close/", {"reason": "  "})

    assert response.status_code == 400
    assert "Say why the run is closed out" in response.content.decode()
    assert events(run, Event.Type.CLOSED_OUT) == 0


def test_closing_a_running_run_is_a_409_and_writes_nothing():
    run = engine.start_run("gate-charge", {}, actor="test", enqueue=False)

    response = client_as("operator").post(f"/runs/{run.public_id}/close/", {"reason": "stop"})

    assert response.status_code == 409
    assert "Not closed:" in response.content.decode()
    assert Run.objects.get(pk=run.pk).status == Run.Status.PENDING


def test_a_viewer_may_not_close_a_run_and_an_unknown_run_is_a_404():
    run = refused_charge()

    assert client_as("viewer").post(f"/runs/{run.public_id}/close/", {"reason": "x"}).status_code == 403  # fmt: skip
    assert client_as("operator").post("/runs/run-987654/close/", {"reason": "x"}).status_code == 404  # fmt: skip
    assert events(run, Event.Type.CLOSED_OUT) == 0

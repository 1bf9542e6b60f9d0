"""The ways out of a failed answer on real `rqworker` processes (issue 42): a charge a
supervisor confirmed and the card processor declined is asked again, and the corrected answer
charges the card exactly once, the run succeeding; a failed run is closed out with a reason
and stays out of the inbox, its chain verifying. What the target holds is read from the
target itself (the demo service); every wait is on database state."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runs import engine
from runs.gates import answers
from runs.gates.acts import TICK
from runs.gates.reopen import ask_again
from runs.ledger.verify import verify_chain
from runs.models import Effect, Event, Gate, GateStatus, Run, StoredPlan
from runs.planning import stored_plans
from runs.reads.inbox import reason_counts
from tests.gates import pipelines as gp
from tests.support.pipelines import registered
from tests.support.processes import Workers, wait_for
from tests.support.refusals import OVER_LIMIT, SUPERVISOR
from tests.support.state import run_status
from tests.support.web import client_as

pytestmark = [pytest.mark.workers, pytest.mark.django_db(transaction=True)]

WORKER_PIPELINES = ",".join(["demo.pipeline.content_pipeline", *gp.PATHS])
# Generous: two cores shared with other test runs.
SLOW = 180


@pytest.fixture(autouse=True)
def gate_pipelines(settings) -> Iterator[None]:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    with registered(settings, *gp.PATHS):
        yield


def charge_run(workers: Workers) -> Run:
    run = engine.start_run("gate-charge", {}, actor="test")
    workers.start("ways-out", env={"RESUMER_PIPELINES": WORKER_PIPELINES})
    return run


def open_fee(run: Run) -> Gate:
    return wait_for(
        lambda: (
            run_status(run) == Run.Status.WAITING
            and Gate.objects.filter(run=run, gate_id="fee", status=GateStatus.OPEN).first()
        ),
        timeout=SLOW,
        what=f"{run.public_id} to wait at its fee",
    )


def ended(run: Run) -> str:
    return wait_for(
        lambda: (s := run_status(run)) in (*Run.TERMINAL, *Run.RESUMABLE) and s,
        timeout=SLOW,
        what=f"{run.public_id} to end",
    )


def approve_fee(run: Run, amount: str) -> None:
    gate = open_fee(run)
    data = {"decision": "approve", TICK: "on", "arg_amount": amount}
    answers.answer(gate.pk, data, actor="sam", roles=SUPERVISOR)


def refused_by_the_workers(workers: Workers) -> Run:
    """A run whose confirmed charge the card processor declined, and its stored plan, both
    written by the workers."""
    run = charge_run(workers)
    approve_fee(run, OVER_LIMIT)
    assert ended(run) == Run.Status.FAILED
    wait_for(
        lambda: StoredPlan.objects.filter(
            run=run, run_version=Run.objects.get(pk=run.pk).version
        ).exists(),
        timeout=SLOW,
        what=f"{run.public_id}'s plan stored by a worker",
    )
    return Run.objects.get(pk=run.pk)


def test_a_refused_confirmed_charge_asked_again_is_charged_once_and_the_run_succeeds(
    workers, redis_conn, demo_service
):
    run = refused_by_the_workers(workers)
    stored = StoredPlan.objects.get(run=run)
    assert stored.blocked
    operator = client_as("operator")
    page = operator.get(f"/runs/{run.public_id}/").content.decode()
    assert "card declined" in page and "supervisor recorded" not in page
    assert "supervisor recorded" not in str(stored.data)

    ask_again(run.pk, actor="user:ana")
    approve_fee(run, "5.00")

    assert ended(run) == Run.Status.SUCCEEDED
    [charge] = demo_service.charges()
    assert charge["amount"] == "5.00"
    assert demo_service.count("charge", outcome="declined") == 1
    made = Effect.objects.get(run=run, call_id="fee", status=Effect.Status.CONFIRMED)
    refused = Effect.objects.get(run=run, call_id="fee", status=Effect.Status.FAILED)
    assert charge["delivery_key"] == made.delivery_key != refused.delivery_key
    assert Event.objects.filter(run=run, type=Event.Type.GATE_REOPENED).count() == 1
    assert "supervisor recorded" not in operator.get(f"/runs/{run.public_id}/").content.decode()
    assert verify_chain(run.pk).ok


def test_a_failed_run_closed_out_stays_closed_and_out_of_the_inbox(
    workers, redis_conn, demo_service
):
    run = refused_by_the_workers(workers)
    assert reason_counts()["total"] == 1

    response = client_as("operator").post(
        f"/runs/{run.public_id}/close/", {"reason": "the customer cancelled the promotion"}
    )

    assert response.status_code == 302
    # Asking the targets again computes and stores a plan: the closed run does not come back.
    stored_plans.refresh(run)
    run.refresh_from_db()
    assert (run.status, run.attention) == (Run.Status.CLOSED, 2)
    assert reason_counts()["total"] == 0
    assert demo_service.charges() == []
    assert verify_chain(run.pk).ok

"""Network faults: the demo service commits and drops the connection, answers after the
tool's time-out, answers 5xx before committing, or is down, for one named call (and is down
while a plan reconciles). Each case ends with the crash matrix's invariants
(tests/faults/network.py). Plain `make test` runs one case per kind of fault; the whole set
runs with RESUMER_FULL_MATRIX=1 (`make faults`), and tests/faults/run_matrix.py prints it.

Then what an operator sees when the platform does not answer while a plan asks it: the plan
says so and is blocked, the page shows the stored plan without asking anyone, and "Check
targets again" asks once more; time-outs bound the worker's plan job and the request.
"""

from __future__ import annotations

import pytest
from django.test import Client

from runs.access import roles
from runs.models import Effect, Run, StoredPlan
from runs.planning.replay import Action
from tests.faults import network
from tests.support.processes import wait_for
from tests.support.state import new_account, wait_settled

pytestmark = [pytest.mark.faults, pytest.mark.workers]


def _params() -> list:
    return [
        pytest.param(
            case,
            id=case.id,
            marks=()
            if network.selected(case)
            else pytest.mark.skip(reason="full matrix only: RESUMER_FULL_MATRIX=1 (make faults)"),
        )
        for case in network.all_cases()
    ]


@pytest.mark.parametrize("case", _params())
def test_a_network_fault_costs_only_the_unfinished_call(case, workers, demo_service, reference):
    result = network.run_network_case(case, workers, demo_service, reference)
    assert result.passed, result.describe()


# --- the platform does not answer while a plan asks it -----------------------------------------


def stored_plan(run: Run) -> StoredPlan:
    run.refresh_from_db()
    return wait_for(
        lambda: StoredPlan.objects.filter(run=run, run_version=run.version).first(),
        what="the stored plan",
    )


def publish_line(stored: StoredPlan) -> dict:
    return next(e for e in stored.data["effects"] if e["call_id"] == "publish")


@pytest.mark.parametrize("how", ["late", "down"])
def test_a_plan_the_platform_does_not_answer_is_blocked_says_so_and_can_be_asked_again(
    how, workers, demo_service
):
    from demo import faults

    if how == "late":
        # The first lookup anyone makes (the worker's plan job, once the run fails) is
        # answered after twice the tool's time-out: the job gives up at the time-out.
        demo_service.arm("publish.lookup", "delay", seconds=10)
    run = faults.start_run(
        "content",
        {"account": new_account("asked-again")},
        actor="test",
        faults={"network": {"publish/publish": "drop"}},
    )
    workers.start()
    assert wait_settled(run.pk) == Run.Status.FAILED
    if how == "late":
        blocked = stored_plan(run)  # the worker's own plan job came back, blocked
    else:
        demo_service.stop()
    operator = Client()
    operator.force_login(roles.ensure_user("op", "op-pass-123456", roles.OPERATOR)[0])

    if how == "down":
        response = operator.post(f"/runs/{run.public_id}/plan/check/")
        assert response.status_code == 302
        blocked = StoredPlan.objects.get(run=run)
    page = operator.get(f"/runs/{run.public_id}/plan/").content.decode()

    assert blocked.blocked
    assert publish_line(blocked)["action"] == Action.BLOCKED
    said = " ".join(blocked.data["blockers"])
    why = {"late": "platform did not answer within 5 s", "down": "platform could not be reached"}
    assert why[how] in said
    assert why[how] in page
    assert "Check targets again</button>" in page
    assert 'name="fingerprint"' not in page  # nothing to approve while it is blocked

    demo_service.start()
    assert operator.post(f"/runs/{run.public_id}/plan/check/").status_code == 302
    asked_again = StoredPlan.objects.get(run=run)
    assert not asked_again.blocked
    assert publish_line(asked_again)["action"] == Action.RECORD_FOUND
    assert Effect.objects.get(run=run, call_id="publish").status == Effect.Status.UNKNOWN

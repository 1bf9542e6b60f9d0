"""Network faults: the demo service fails one named call's request, for real, and the run must
end as the crash matrix's runs do. Shared by pytest (tests/faults/test_network_faults.py) and
tests/faults/run_matrix.py, like tests/faults/matrix.py, whose checks it reuses.

For each HTTP call of the demo pipeline (render, upload, publish, charge), the service:

    drop   commits, then drops the connection without answering
    late   commits, then answers after the tool's read time-out (5 s)
    5xx    answers 503 before committing anything
    down   is down during the call (ServiceProcess.stop() once the call's intent is recorded)

and, for the publish, `down-while-planning`: its answer was dropped, and the platform is down
while the plan reconciles it. The fault is armed through the run's `network` fault
(demo/faults.py), for the call's own delivery key, on the run's first attempt only.

What follows is what each replay policy makes of it: an IDEMPOTENT tool retries with the same
key inside the call and the run succeeds at once; otherwise the outcome is unknown, the run
fails, the plan reconciles the publish (record what the platform holds, or call), a supervisor
looks the charge up at the card processor, the strict resume is approved and runs to success.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tests.faults.matrix import (
    INVARIANTS,
    PIPELINE,
    CaseResult,
    Marks,
    event_payload,
    full_matrix,
    resume_and_check,
    world_checks,
)
from tests.support.processes import Workers, wait_for
from tests.support.state import new_account, run_status, wait_lease_free, wait_settled

MODES = {
    "drop": "the service commits, then drops the connection without answering",
    "late": "the service commits, then answers after the tool's time-out",
    "5xx": "the service answers 503 before committing",
    "down": "the service is down during the call",
}
PLANNING = "down-while-planning"
CALLS = ("visual/render-cover", "visual/upload-cover", "publish/publish", "publish/promote-charge")
# What plain `make test` runs: one case per kind of fault, across the four policies' calls.
REPRESENTATIVE = (
    "visual/render-cover/drop",
    "visual/upload-cover/down",
    "publish/publish/late",
    "publish/promote-charge/5xx",
    f"publish/publish/{PLANNING}",
)

NETWORK_INVARIANTS: dict[str, str] = {
    "fault-acted": "the call's first request met the fault (its recorded exchange says how)",
    "outcome": "IDEMPOTENT: retried with the same key in the call, confirmed; others: outcome "
    "unknown, the run failed",
    "blocked-while-down": "while the platform is down the stored plan is blocked and says it "
    "could not be reached; asked again once it is up, it is not",
    "plan-answers": "the plan does what the facts allow: retry with the key, record what the "
    "platform holds, call again, or wait for a supervisor (charge)",
    "succeeded": "the run succeeded (after the strict resume, where one was needed)",
    "plan-kept": INVARIANTS["plan-kept"],
    "one-article": INVARIANTS["one-article"],
    "one-upload-per-asset": INVARIANTS["one-upload-per-asset"],
    "renders-billed-once": "one billed render per key",
    "charge-at-most-once": INVARIANTS["charge-at-most-once"],
    "ledger-settled": INVARIANTS["ledger-settled"],
    "outputs-match-world": INVARIANTS["outputs-match-world"],
    "artifacts-equal": "final artifacts equal a run without a fault",
    "seq-gap-free": INVARIANTS["seq-gap-free"],
    "checkpoints-verified": INVARIANTS["checkpoints-verified"],
}
TITLE = "Network faults: the demo service fails one call's request; plan, resume, invariants"


@dataclass(frozen=True)
class NetworkCase:
    stage: str
    call: str
    mode: str

    @property
    def id(self) -> str:
        return f"{self.stage}/{self.call}/{self.mode}"

    @property
    def fault(self) -> str:
        """The fault the call meets (the planning case's publish answer is dropped)."""
        return "drop" if self.mode == PLANNING else self.mode

    def __str__(self) -> str:
        return self.id


def all_cases() -> list[NetworkCase]:
    cases = []
    for point in CALLS:
        stage, call = point.split("/")
        cases += [NetworkCase(stage, call, mode) for mode in MODES]
    return [*cases, NetworkCase("publish", "publish", PLANNING)]


def selected(case: NetworkCase) -> bool:
    return full_matrix() or case.id in REPRESENTATIVE


# --- What the call's events say --------------------------------------------------------------


def first_outcome(run, call: str):
    """The first TOOL_RESULT or FAILED event of the call (its first attempt), or None."""
    from runs.models import Event

    events = Event.objects.filter(
        run=run, type__in=(Event.Type.TOOL_RESULT, Event.Type.FAILED)
    ).order_by("seq")
    for event in events:
        payload = event_payload(event)
        if payload.get("call") == call:
            return event, payload
    return None, {}


def fault_acted(fault: str, exchanges: list[dict]) -> bool:
    if not exchanges:
        return False
    first = exchanges[0]
    error = first.get("error", "")
    if fault == "5xx":
        return (first["response"] or {}).get("status") == 503
    if first["response"] is not None:
        return False
    if fault == "drop":
        return "without a response" in error
    if fault == "late":
        return "did not answer within 5 s" in error
    return "refused" in error.lower() or "connect" in error.lower()  # down


def expected_action(policy: str, fault: str) -> str:
    from runs.models import ReplayPolicy
    from runs.planning.replay import Action

    if policy == ReplayPolicy.IDEMPOTENT:
        return Action.RETRY_SAME_KEY
    if policy == ReplayPolicy.RECONCILE_FIRST:
        # drop and late committed before failing: the platform holds the article.
        return Action.RECORD_FOUND if fault in ("drop", "late") else Action.CALL
    return Action.BLOCKED


# --- One case ------------------------------------------------------------------------------------


def run_network_case(
    case: NetworkCase, workers: Workers, service, reference: dict[str, str]
) -> CaseResult:
    """Drive one network case end to end against `service` (a ServiceProcess: the case stops
    and starts it) and check every invariant. Never raises for a case that fails."""
    started = time.monotonic()
    result = CaseResult(case, invariants=NETWORK_INVARIANTS)
    try:
        _drive(case, workers, service, reference, result)
    except Exception as exc:  # a hung or broken case is a failed case, reported as such
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.logs = [str(p) for p in workers.log_paths.values()]
        workers.stop_all()
        workers.log_paths.clear()
        if not service.running:
            service.start()  # no case leaves the outside world down for the next one
        service.disarm()
        result.seconds = time.monotonic() - started
    return result


def _drive(case: NetworkCase, workers: Workers, service, reference, result: CaseResult) -> None:
    from demo import faults
    from runs.models import Event, ReplayPolicy, Run, StoredPlan
    from runs.pipeline import registry
    from runs.planning import stored_plans
    from runs.planning.planner import compute_plan

    pipeline = registry.get(PIPELINE)
    call = next(c for c in pipeline.stage(case.stage).calls if c.call_id == case.call)
    policy = pipeline.tool(call.tool).policy
    marks = Marks.now()
    run = faults.start_run(
        PIPELINE,
        {"account": new_account(f"net-{case.fault}")},
        actor="fault-matrix",
        faults={"network": {f"{case.stage}/{case.call}": case.fault}},
    )
    result.run_id = run.public_id

    workers.start(f"{case.call}-{case.mode}")
    if case.fault == "down":
        wait_for(
            lambda: (
                Event.objects.filter(
                    run=run, type=Event.Type.TOOL_CALLED, payload__call=case.call
                ).exists()
                or run_status(run.pk) not in Run.ACTIVE
            ),
            timeout=120,
            what=f"the {case.call} intent",
        )
        service.stop()  # the call waits for this (demo/faults.py), then meets a closed port
    status = wait_settled(run.pk, timeout=120)
    if not service.running:
        service.start()

    event, payload = first_outcome(run, case.call)
    exchanges = payload.get("exchanges", [])
    result.check(
        "fault-acted",
        fault_acted(case.fault, exchanges),
        f"first exchange: {exchanges[0] if exchanges else 'none recorded'}",
    )
    if policy == ReplayPolicy.IDEMPOTENT and case.fault != "down":
        outcomes = [e["outcome"] for e in exchanges]
        result.check(
            "outcome",
            status == Run.Status.SUCCEEDED
            and event.type == Event.Type.TOOL_RESULT
            and outcomes == ["retried", "confirmed"]
            and not Event.objects.filter(run=run, type=Event.Type.RESUMED).exists(),
            f"run {status}, exchanges {outcomes}",
        )
        result.check("succeeded", status == Run.Status.SUCCEEDED, f"run ended {status}")
        world_checks(result, run, marks, reference)
        return
    result.check(
        "outcome",
        status == Run.Status.FAILED
        and event is not None
        and event.type == Event.Type.FAILED
        and payload.get("status") == "unknown",
        f"run {status}, {event.type if event else 'no'} event, status {payload.get('status')}",
    )
    if status != Run.Status.FAILED:
        return

    # The stop has a worker compute the stored plan; once it is stored, no worker is left to
    # act before the approval (the meters read after it hold only the resumed work).
    run.refresh_from_db()
    wait_for(
        lambda: StoredPlan.objects.filter(run=run, run_version=run.version).exists(),
        timeout=60,
        what="the stored plan",
    )
    if case.mode == PLANNING:
        service.stop()
        try:
            down = stored_plans.refresh(run)  # what "Check targets again" does
        finally:
            service.start()
        again = stored_plans.refresh(run)
        result.check(
            "blocked-while-down",
            down.blocked
            and "platform could not be reached" in " ".join(down.blockers)
            and not again.blocked,
            f"while down: {down.blockers}; up again: {again.blockers}",
        )
    # The sweeper lets the lease go after the stop's after-commit work; stopped before that,
    # it would leave the lease held and a supervisor's ledger edit refused.
    wait_lease_free(run)
    workers.stop_all()

    plan = compute_plan(run)
    line = next(e for e in plan.effects if e.call_id == case.call)
    expected = expected_action(policy, case.fault)
    result.check(
        "plan-answers",
        line.action == expected,
        f"{case.call}: {line.action} ({line.answer}), expected {expected}",
    )
    resume_and_check(result, run, plan, workers, marks, reference)

"""Helpers shared by the reconcile-plan tests (test_planner, test_resume, test_upgrade,
test_plan_commands). Not a test module: it only builds runs and reads their facts.

Two ways to get an unfinished run:

* `crashed_run` / `failed_run`: real `rqworker` processes against real Redis (the `workers`
  fixture), for the acceptance scenarios;
* `run_in_process`: the same engine code (`engine.execute`, the same leases and ledger) called
  from the test process, stage after stage, for tests about the plan value, refusals and the
  CLI. Only the `timeout` fault can be used here: a `crash` fault SIGKILLs the process it runs
  in, which would be pytest.
"""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from typing import Any

import django_rq
from django.conf import settings
from django.core.files.storage import default_storage
from django.db import connection

from demo import faults
from runs import engine
from runs.execution import sweeper
from runs.ledger import artifacts
from runs.ledger.maintenance import maintenance
from runs.models import Checkpoint, Effect, Event, Lease, Run
from runs.planning import stored_plans
from tests.support.processes import Workers, wait_for
from tests.support.state import run_status

TOPIC = "resumable-agents"


def run_in_process(options: dict[str, Any] | None = None) -> Run:
    """Start a content run and execute its stages here until it stops (fails, succeeds)."""
    run = faults.start_run("content", {}, actor="test", faults=options or {}, enqueue=False)
    hooks = faults.FaultHooks()
    for _ in range(20):
        run.refresh_from_db()
        if not (run.is_active and run.ticket):
            break
        engine.execute(run.pk, run.current_stage, run.ticket, holder="test:in-process", hooks=hooks)
    # Every VERIFIED queued the next stage in Redis as well (dispatch after commit); this test
    # ran those stages itself, so drop the jobs rather than leave them for a later worker.
    django_rq.get_connection(settings.RESUMER_QUEUE).flushdb()
    run.refresh_from_db()
    return run


def stopped_in_process(options: dict[str, Any] | None = None) -> Run:
    """run_in_process, then what a worker's plan job does once a run stops: its plan is
    computed (asking its targets) and stored. Tests without workers never run that job."""
    from runs.planning import stored_plans

    run = run_in_process(options)
    if run.is_resumable:
        stored_plans.refresh(run)
    return run


def stopped_with_plan(options: dict[str, Any] | None = None, **inputs: str) -> Run:
    """A content run executed here stage by stage (seed_demo.run_inline: nothing queued) until
    it stops, with the plan its stop asks for stored, as the worker's plan job would. Works
    inside a test's transaction (no worker, no Redis)."""
    from demo.management.commands.seed_demo import run_inline

    run = faults.start_run("content", inputs, actor="test", faults=options or {}, enqueue=False)
    run = run_inline(run.pk)
    if run.is_resumable:
        stored_plans.refresh(run)
    return run


def charge_unknown() -> Run:
    """A content run whose promotion charge happened at the card processor but whose answer
    never arrived (a NEVER effect, unknown): failed, its plan blocked. Executed here stage by
    stage (seed_demo.run_inline), nothing queued."""
    from demo.management.commands.seed_demo import run_inline

    run = faults.start_run(
        "content",
        {},
        actor="test",
        faults={"timeout": "publish/promote-charge/after"},
        enqueue=False,
    )
    return run_inline(run.pk)


def finished_deviated() -> Run:
    """A content run that succeeded and was then marked as departed from its plan, as the
    contract check marks resumed work that did more than promised."""
    from demo.management.commands.seed_demo import run_inline
    from runs.events import PlanDeviated
    from runs.ledger import leases
    from runs.ledger.append import RunMove, Writer, append

    run = run_inline(engine.start_run("content", {}, actor="test", enqueue=False).pk)
    token = leases.acquire(run.pk, "test", takeover=True)
    append(
        Writer(run.pk, token, "test"),
        PlanDeviated(reason="render_image: 2 calls, the plan said 1"),
        move=RunMove(deviated=True),
    )
    leases.release(run.pk, token)
    return Run.objects.get(pk=run.pk)


def interrupted_with_plan(**inputs: str) -> Run:
    """A run whose worker vanished before its first stage: interrupted at research, with its
    plan stored. The cheapest run that needs a human."""
    run = engine.start_run("content", inputs, actor="test", enqueue=False)
    sweeper.interrupt(sweeper.Finding(run.pk, "test: the worker vanished", {}), takeover=True)
    run.refresh_from_db()
    stored_plans.refresh(run)
    return run


def run_one_stage_in_process() -> Run:
    """A run that is still running: its first stage verified, the next one queued."""
    run = engine.start_run("content", {}, actor="test", enqueue=False)
    engine.execute(run.pk, run.current_stage, run.ticket, holder="test:in-process")
    django_rq.get_connection(settings.RESUMER_QUEUE).flushdb()
    run.refresh_from_db()
    return run


def resumed_inline(options: dict[str, Any]) -> Run:
    """A run that stopped where `options` say, was approved for a strict resume, and then ran
    to its end: every stage executed in this process (seed_demo.run_inline), no Redis."""
    from demo.management.commands.seed_demo import run_inline
    from runs.planning.planner import compute_plan
    from runs.planning.resume import approve

    run = faults.start_run("content", {}, actor="test", faults=options, enqueue=False)
    run = run_inline(run.pk)
    approve(run, "strict", compute_plan(run).fingerprint, actor="test")
    return run_inline(run.pk)


def crashed_run(workers: Workers, options: dict[str, Any]) -> Run:
    """The worker is SIGKILLed at the crash point; a healthy worker's sweeper interrupts the
    run. The healthy worker stays up to execute whatever is approved next."""
    run = faults.start_run("content", {}, actor="test", faults=options)
    doomed = workers.start()
    doomed.wait(timeout=120)
    assert doomed.returncode == -signal.SIGKILL
    workers.start()
    wait_for(lambda: run_status(run) == Run.Status.INTERRUPTED, what="interrupted")
    run.refresh_from_db()
    return run


def failed_run(workers: Workers, options: dict[str, Any]) -> Run:
    """A timeout fault: the call's outcome is unknown and the run fails; the worker lives on."""
    run = faults.start_run("content", {}, actor="test", faults=options)
    workers.start()
    wait_for(lambda: run_status(run) == Run.Status.FAILED, what="failed")
    run.refresh_from_db()
    return run


def wait_succeeded(run: Run) -> Run:
    wait_for(lambda: run_status(run) in Run.TERMINAL or run_status(run) in Run.RESUMABLE)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, f"{run.public_id} ended {run.status}"
    return run


def ledger_state(run: Run) -> dict[str, Any]:
    """Everything an approval could have changed, to compare before and after a refusal."""
    row = Run.objects.values("status", "version", "last_seq", "head_hash", "ticket").get(pk=run.pk)
    return {
        **row,
        "events": Event.objects.filter(run=run).count(),
        "runs": Run.objects.count(),
        "effects": sorted(Effect.objects.values_list("pk", "status", "external_id")),
        "lease_token": Lease.objects.get(run=run).token,
    }


def event_types(run: Run) -> list[str]:
    return list(Event.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def checkpoint(run: Run, stage: str) -> Checkpoint:
    return Checkpoint.objects.filter(run=run, stage=stage).order_by("-last_seq").first()


def effect(run: Run, call_id: str) -> Effect:
    return Effect.objects.get(run=run, call_id=call_id)


def change_manifest(checkpoint: Checkpoint, **changes: Any) -> None:
    """What someone who can write to the database does to a sealed checkpoint: lift the
    append-only triggers and rewrite its manifest with raw SQL."""
    manifest = {**checkpoint.manifest, **changes}
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with maintenance(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE runs_checkpoint SET manifest = %s{cast} WHERE id = %s",
            [json.dumps(manifest), checkpoint.id],
        )


def blob_file(uri: str) -> str:
    return default_storage.path(artifacts.get(uri).blob)


@contextlib.contextmanager
def tampered(uri: str, how: str) -> Iterator[str]:
    """Overwrite ("alter") or remove ("delete") the blob behind an artifact, and put the
    original bytes back afterwards: blobs are content-addressed and shared by every run whose
    artifact has the same bytes, and MEDIA_ROOT outlives the test database."""
    path = blob_file(uri)
    with open(path, "rb") as handle:
        original = handle.read()
    try:
        if how == "alter":
            with open(path, "wb") as handle:
                handle.write(original.replace(b"<svg", b"<svg data-tampered='1'", 1) + b"\n")
        elif how == "delete":
            default_storage.delete(artifacts.get(uri).blob)
        else:
            raise ValueError(how)
        yield path
    finally:
        current = None
        with contextlib.suppress(FileNotFoundError), open(path, "rb") as handle:
            current = handle.read()
        if current != original:
            with open(path, "wb") as handle:
                handle.write(original)


def charge_found_and_resumed() -> Run:
    """A demo run whose promotion charge timed out after the card was charged, which a
    supervisor found at the card processor and recorded as made (a ledger edit), strictly
    resumed here to its end: the resume reuses the charge instead of charging again."""
    from demo.management.commands.seed_demo import run_inline
    from runs.ledger.edits import edit_effect
    from runs.models import Effect
    from runs.planning.planner import compute_plan
    from runs.planning.resume import approve

    run = run_in_process({"timeout": "publish/promote-charge/after"})
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    edit_effect(
        charge.pk,
        {"status": Effect.Status.CONFIRMED, "external_id": "ch-found"},
        reason="the card processor shows the charge",
        actor="user:supervisor",
    )
    run.refresh_from_db()
    approve(run, "strict", compute_plan(run).fingerprint, actor="test")
    return run_inline(run.pk)

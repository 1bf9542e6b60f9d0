"""A one-stage pipeline whose stage logs and then fails the way its `mode` input says, for the
tests of what a failed stage leaves the operator (runs/execution/stage_log.py).

Register it with tests.support.pipelines.registered(settings, failing.PATH)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path

from django.db import connection

from runs import engine
from runs.execution import stage_log
from runs.models import Run, StageLog
from runs.pipeline import Input, InvalidInput, Pipeline, Stage, StageOutput
from tests.support.processes import wait_for

PATH = "tests.support.failing.failing"
MODES = (
    "raise",
    "verbose",
    "long-lines",
    "long-traceback",
    "ok",
    "other-thread",
    "flush",
    "killed",
    "hold",
)
# "hold": the stage holds its lease until this file (named in the worker's environment)
# exists, so a test can look at a worker while it works.
RELEASE_ENV = "FAILING_RELEASE_FILE"
# Under `runs`, whose INFO lines the logging configuration lets through (RESUMER_LOG_LEVEL).
log = logging.getLogger("runs.tests.failing")
# A stage's thread cannot hand the test what it saw but through the module.
seen_mid_stage: list[dict] = []


def _validate(value: str, pinned: dict[str, str]) -> None:
    if value not in MODES:
        raise InvalidInput(f"mode must be one of {', '.join(MODES)}")


def reconcile_totals(invoices: int) -> None:
    """The user's code that raises: its name is in the traceback."""
    raise ValueError(f"ledger total {invoices} != {invoices + 1} <b>not bold</b>")


def _check(ctx) -> StageOutput:
    mode = ctx.inputs["mode"]
    log.info("checking invoice 1 <script>alert('x')</script>")
    if mode == "raise":
        log.warning("totals disagree")
        reconcile_totals(12)
    if mode == "verbose":
        for n in range(300):
            log.info("checking invoice %d", n)
        raise RuntimeError("gave up after 300 invoices")
    if mode == "long-lines":
        for n in range(40):
            log.info("line %d %s", n, "x" * 3000)
        log.info("huge %s", "y" * 10_000)
        raise RuntimeError("too much to read")
    if mode == "long-traceback":
        raise ValueError("z" * 40_000 + " the end")
    if mode == "other-thread":
        thread = threading.Thread(target=lambda: log.warning("from another thread"))
        thread.start()
        thread.join()
        raise RuntimeError("the stage's own failure")
    if mode == "flush":
        _flush_and_look(ctx.run.pk)
    if mode == "hold":
        release = Path(os.environ[RELEASE_ENV])
        wait_for(release.exists, timeout=300, what="the test's release")
    if mode == "killed":
        log.warning("the last words before the kill")
        # The flusher thread's own timer (the test makes it short) writes the row.
        wait_for(lambda: StageLog.objects.filter(run_id=ctx.run.pk).exists(), what="a flush")
        os.kill(os.getpid(), signal.SIGKILL)
    return StageOutput(outputs={"checked": True})


def _flush_and_look(run_pk: int) -> None:
    """One flusher round from another thread, as the flusher's own would, while the stage
    runs; what the row then says is kept for the test."""

    def flush() -> None:
        try:
            stage_log.flusher.round()
        finally:
            connection.close()

    thread = threading.Thread(target=flush)
    thread.start()
    thread.join()
    seen_mid_stage.extend(StageLog.objects.filter(run_id=run_pk).values("outcome", "lines"))


failing = Pipeline(
    name="failing",
    inputs=(Input("mode", lambda pinned: "raise", _validate, versioned=False),),
    tools=(),
    stages=(Stage("check", _check, consumes=("mode",)),),
)


def start(mode: str, *, enqueue: bool = False) -> Run:
    """A run of the pipeline; queued for a worker with `enqueue`, else for execute()."""
    return engine.start_run("failing", {"mode": mode}, actor="test", enqueue=enqueue)


def execute(run: Run) -> engine.Outcome:
    """Run the stage in this process, as a worker would."""
    run.refresh_from_db()
    return engine.execute(run.pk, run.current_stage, run.ticket, holder="worker:test")


def failed_run(mode: str = "raise") -> Run:
    run = start(mode)
    execute(run)
    run.refresh_from_db()
    return run

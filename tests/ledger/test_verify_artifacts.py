"""verify_chain on artifacts (issue 47): a run whose last stage writes its artifacts with its
last events verifies on both databases, however the database's clock stamps the statements
of one transaction; an artifact whose events were deleted is still reported."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from runs import engine
from runs.execution.engine import Outcome
from runs.ledger.maintenance import maintenance
from runs.ledger.verify import verify_chain
from runs.models import Artifact, Event, Run
from runs.pipeline import Pipeline, Stage, StageOutput
from tests.support.pipelines import registered


def _write(ctx) -> StageOutput:
    return StageOutput(
        outputs={"n": 2},
        artifacts={"text": (b"three facts", "text/plain"), "more": (b"and one", "text/plain")},
    )


one_stage = Pipeline(
    name="one-stage-artifacts",
    description="one stage that ends the run with its artifacts",
    tools=(),
    stages=(Stage("write", _write),),
)


@pytest.fixture
def pipeline(transactional_db, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    with registered(settings, "tests.ledger.test_verify_artifacts.one_stage"):
        yield


def _finished_run() -> Run:
    run = engine.start_run("one-stage-artifacts", {}, actor="test", enqueue=False)
    run.refresh_from_db()
    assert engine.execute(run.pk, "write", run.ticket, holder="worker:test") == Outcome.VERIFIED
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    return run


def _clock_moves_before_artifact_rows(execute, sql, params, many, context):
    # On SQLite the database's clock is read per statement: a run's last artifact rows may
    # be stamped a millisecond after its last events. Make that happen every time.
    if sql.lstrip().upper().startswith("INSERT") and "runs_artifact" in sql:
        start = time.time_ns() // 1_000_000
        while time.time_ns() // 1_000_000 == start:
            pass
    return execute(sql, params, many, context)


def test_many_single_stage_runs_with_artifacts_all_verify(pipeline):
    with connection.execute_wrapper(_clock_moves_before_artifact_rows):
        runs = [_finished_run() for _ in range(40)]

    problems = {run.public_id: verify_chain(run.pk).problems for run in runs}

    assert Artifact.objects.filter(run__in=runs).count() == 80
    assert problems == {run.public_id: [] for run in runs}


def test_an_artifact_whose_events_were_deleted_is_reported(pipeline):
    run = _finished_run()
    verified = Event.objects.get(run=run, type=Event.Type.VERIFIED)
    before = Event.objects.get(run=run, seq=verified.seq - 1)
    with maintenance(), connection.cursor() as cursor:
        # What a rollback leaves: the events after STARTED gone, the head written back, the
        # checkpoint gone with them; only the artifact rows remain.
        cursor.execute("DELETE FROM runs_checkpoint WHERE run_id = %s", [run.pk])
        cursor.execute(
            "DELETE FROM runs_event WHERE run_id = %s AND seq >= %s", [run.pk, verified.seq]
        )
        cursor.execute(
            "UPDATE runs_run SET last_seq = %s, head_hash = %s WHERE id = %s",
            [before.seq, before.hash, run.pk],
        )

    report = verify_chain(run.pk)

    gone = [p for p in report.problems if "belongs to events that are gone" in p]
    assert len(gone) == 2, report.problems

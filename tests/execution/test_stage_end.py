"""How a stage ends (issue 28): VERIFIED, its checkpoint, its artifact rows and the lease's
release in one write when the stage has a next one; at the end, with SUCCEEDED. Stages run
in-process through engine.execute, on committed data."""

from __future__ import annotations

import pytest

from runs import engine
from runs.execution.engine import Outcome
from runs.ledger import artifacts
from runs.models import Artifact, Checkpoint, Event, Lease, Run
from runs.pipeline import Pipeline, Stage, StageOutput
from tests.support.pipelines import registered


def _write(ctx) -> StageOutput:
    return StageOutput(outputs={"n": 1}, artifacts={"text": (b"three facts", "text/plain")})


def _read(ctx) -> StageOutput:
    return StageOutput(outputs={"uri": ctx.upstream("write").artifacts[0]["uri"]})


write_then_read = Pipeline(
    name="write-then-read",
    description="a stage that stores an artifact, then one that reads its checkpoint",
    tools=(),
    stages=(Stage("write", _write), Stage("read", _read)),
)


@pytest.fixture
def pipeline(transactional_db, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    with registered(settings, "tests.execution.test_stage_end.write_then_read"):
        yield


def _run_stage(run: Run, stage: str) -> Outcome:
    run.refresh_from_db()
    return engine.execute(run.pk, stage, run.ticket, holder="worker:test")


def test_a_run_never_resumed_writes_its_stage_artifact_as_version_one(pipeline):
    run = engine.start_run("write-then-read", {}, actor="test", enqueue=False)
    assert _run_stage(run, "write") == Outcome.VERIFIED
    name = f"write/{run.public_id}/text"
    assert list(Artifact.objects.filter(name=name).values_list("version", flat=True)) == [1]
    checkpoint = Checkpoint.objects.get(run=run, stage="write")
    assert checkpoint.artifacts[0]["uri"] == f"artifact://{name}/v1"
    assert artifacts.read(checkpoint.artifacts[0]["uri"]) == b"three facts"
    # Given back by the stage's last write: the next stage's job takes it at once.
    assert Lease.objects.get(run=run).holder == ""
    assert _run_stage(run, "read") == Outcome.VERIFIED
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert Checkpoint.objects.get(run=run, stage="read").outputs == {"uri": f"artifact://{name}/v1"}


def test_a_stage_whose_first_artifact_version_was_taken_verifies_on_the_next(pipeline):
    run = engine.start_run("write-then-read", {}, actor="test", enqueue=False)
    name = f"write/{run.public_id}/text"
    taken = artifacts.store(name, b"written by someone else", "text/plain", run=run)
    assert _run_stage(run, "write") == Outcome.VERIFIED
    versions = list(Artifact.objects.filter(name=name).order_by("version"))
    assert [(a.pk == taken.pk, a.version) for a in versions] == [(True, 1), (False, 2)]
    checkpoint = Checkpoint.objects.get(run=run, stage="write")
    assert checkpoint.artifacts[0]["uri"] == f"artifact://{name}/v2"
    # One VERIFIED: the write that found the version taken wrote nothing.
    assert Event.objects.filter(run=run, type=Event.Type.VERIFIED).count() == 1
    assert Lease.objects.get(run=run).holder == ""

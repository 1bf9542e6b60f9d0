"""A pipeline whose one stage leaves Redis as a restart during the stage job's start does
(tests/faults/test_outage.py): RQ opens a job with a pipelined heartbeat, and redis-py retries
a command for a few seconds while Redis is away, so that heartbeat may land on a Redis that
has just come back empty. What is left is an empty Redis holding only the worker's hash, with
its `last_heartbeat` field, and no worker registered. A worker learns of the pipeline through
RESUMER_PIPELINES."""

from __future__ import annotations

from rq import get_current_job
from rq.utils import now, utcformat

from runs.pipeline import Pipeline, Stage, StageOutput

PATH = "tests.faults.restart_pipeline.restarted"


def _restart_under_the_job(ctx) -> StageOutput:
    job = get_current_job()
    redis = job.connection
    redis.flushall()
    redis.hset(f"rq:worker:{job.worker_name}", "last_heartbeat", utcformat(now()))
    return StageOutput(outputs={"done": "yes"})


restarted = Pipeline(
    name="restarted",
    inputs=(),
    tools=(),
    stages=(Stage("restart", _restart_under_the_job),),
)

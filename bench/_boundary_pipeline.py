"""The pipeline bench/stage_cost.py runs: bench/fleet.py's three stages with their tool calls
taken out, so what a stage costs is its boundary alone, and the same work as bare RQ jobs.

    gather   outputs six items
    compose  reads gather's output, stores a small JSON artifact, outputs its digest
    post     reads compose's output

Registered like any user's pipeline (PYTHONPATH=bench RESUMER_PIPELINES=_boundary_pipeline.
boundary). The bare side (bare_stage) does what each stage does without a ledger: it passes
the outputs along in the next job's arguments and stores the artifact's bytes in the same
storage, content-addressed as artifacts.store() does, then queues the next job.
"""

from __future__ import annotations

import hashlib
import json

from runs.pipeline import Pipeline, Rule, Stage, StageOutput

STAGES = ("gather", "compose", "post")


def _items() -> list[str]:
    return [f"{source}-{i}" for source in "ab" for i in range(3)]


def _artifact(run: str, items: list[str]) -> bytes:
    # The run's name in the bytes: each run stores a blob of its own on both sides, never a
    # content-addressed hit on the last run's.
    return json.dumps({"run": run, "text": " ".join(items)}).encode()


def gather(ctx) -> StageOutput:
    return StageOutput(outputs={"items": _items()})


def compose(ctx) -> StageOutput:
    data = _artifact(ctx.root_id, ctx.upstream("gather").outputs["items"])
    return StageOutput(
        outputs={"digest": hashlib.sha256(data).hexdigest()},
        artifacts={"text": (data, "application/json")},
    )


def post(ctx) -> StageOutput:
    return StageOutput(outputs={"post": ctx.upstream("compose").outputs["digest"][:12]})


boundary = Pipeline(
    name="boundary",
    description="gather → compose → post, no tool calls: the stage boundary alone",
    tools=(),
    stages=(
        Stage("gather", gather, rules=(Rule("six items", lambda o: len(o.outputs["items"]) == 6),)),
        Stage(
            "compose", compose, rules=(Rule("digest", lambda o: len(o.outputs["digest"]) == 64),)
        ),
        Stage("post", post, rules=(Rule("posted", lambda o: bool(o.outputs["post"])),)),
    ),
)


def bare_stage(run_key: str, stage: str, state: dict) -> str:
    """One stage as a plain RQ job: the same outputs, the artifact's bytes stored, the next
    job queued with the outputs in its arguments."""
    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage

    from runs import enqueue
    from runs.ledger.artifacts import blob_path

    if stage == "gather":
        following = ("compose", {"items": _items()})
    elif stage == "compose":
        data = _artifact(run_key, state["items"])
        digest = hashlib.sha256(data).hexdigest()
        path = blob_path(digest)
        if not default_storage.exists(path):
            default_storage.save(path, ContentFile(data))
        following = ("post", {"digest": digest})
    else:
        assert state["digest"]
        return "done"
    enqueue.queue().enqueue(
        "_boundary_pipeline.bare_stage",
        run_key,
        *following,
        job_id=f"bare-{run_key}-{following[0]}",
        result_ttl=3600,
        failure_ttl=24 * 3600,
    )
    return "done"

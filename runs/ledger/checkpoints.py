"""Verified checkpoints: naming, sealing one on its VERIFIED event, finding the newest one a
run can build on, and whether its manifest is still the one that was verified."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from functools import reduce
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Q

from runs.events import Verified
from runs.ledger import derived
from runs.ledger.append import RunMove, Writer, append
from runs.ledger.chain import manifest_hash, manifest_ok
from runs.ledger.sql import boundary_for
from runs.ledger.sql.shapes import ARTIFACT_COLUMNS, CheckpointSeal
from runs.models import Artifact, Checkpoint, Event, Run

__all__ = [
    "checkpoint_id",
    "latest_checkpoint",
    "manifest_ok",
    "manifest_problems",
    "write_checkpoint",
]


def checkpoint_id(run: Run, stage: str) -> str:
    base = f"{run.public_id}:{stage}-verified"
    if not run.attempt:
        # A run never resumed verifies each stage once (a stage runs again only on an
        # approved resume, which counts an attempt): no count needed on the common path.
        return base
    taken = Checkpoint.objects.filter(run=run, stage=stage).count()
    return base if taken == 0 else f"{base}-{taken + 1}"


def write_checkpoint(
    writer: Writer,
    run: Run,
    *,
    stage: str,
    next_stage: str,
    manifest: dict[str, Any],
    move: RunMove,
    usage: dict[str, Any] | None = None,
    release: bool = False,
    then: str | None = None,
    artifacts: Sequence[Artifact] = (),
) -> Checkpoint:
    """Append VERIFIED with the checkpoint sealed on its seq (CheckpointSeal): one write, so
    neither is ever observed without the other; outside a transaction, on PostgreSQL one
    statement. `move`, `then` and `release` as append's. `artifacts` (unsaved, versions set:
    artifacts.first_version) are written with it; IntegrityError, nothing written, when a
    version is taken. In a caller's transaction it is that one's, without a savepoint: a
    refusal (LeaseLost) writes nothing and leaves it usable."""
    seal = CheckpointSeal(
        id=checkpoint_id(run, stage),
        stage=stage,
        next_stage=next_stage,
        manifest=manifest,
        artifacts=tuple(tuple(getattr(a, c) for c in ARTIFACT_COLUMNS) for a in artifacts),
    )
    event = Verified(
        stage=stage,
        input_versions=manifest.get("inputs", {}),
        artifact_refs=[a["uri"] for a in manifest.get("artifacts", [])],
        rules=manifest.get("rules", []),
        next_stage=next_stage,
        # The manifest's hash goes into the chain with this event: a manifest changed
        # afterwards no longer matches it (manifest_ok).
        manifest_sha256=manifest_hash(manifest),
        # What the stage's calls used: a resume's plan is held against the sum.
        usage=usage or {},
    )
    verified = append(writer, event, move=move, seal=seal, release=release, then=then)
    # The row exists now; the instance reads as a query would have returned it.
    checkpoint = Checkpoint(
        id=seal.id,
        run=run,
        last_seq=verified.seq,
        stage=stage,
        next_stage=next_stage,
        manifest=manifest,
        created_at=verified.sealed_at,
    )
    checkpoint._state.adding, checkpoint._state.db = False, verified._state.db
    return checkpoint


def latest_checkpoint(run: Run, stage: str) -> Checkpoint | None:
    """The newest checkpoint of `stage` this run can build on: its own, else those its
    branch point inherits (up to that checkpoint's seq, on whichever ancestor holds it)."""
    node: Run | None = run
    limit: int | None = None
    db = connections[DEFAULT_DB_ALIAS]
    while node is not None:
        with boundary_for(db).cursor(db) as cursor:
            found = boundary_for(db).latest_checkpoint(cursor, db, node.pk, stage, limit)
        if found is not None:
            return found
        point = node.branch_checkpoint
        if point is None:  # a root run, or a branch that starts from the beginning
            return None
        node, limit = point.run, point.last_seq
    return None


def manifest_problems(checkpoints: Sequence[Checkpoint]) -> dict[str, str]:
    """Checkpoint id -> why it is not what its VERIFIED event sealed (its manifest, its stage,
    its next stage), for those of `checkpoints` that are not; their VERIFIED events are read
    in one query."""
    if not checkpoints:
        return {}
    sealing = reduce(operator.or_, (Q(run_id=c.run_id, seq=c.last_seq) for c in checkpoints))
    events = {(e.run_id, e.seq): e for e in Event.objects.filter(sealing)}
    problems = {}
    for checkpoint in checkpoints:
        sealing = events.get((checkpoint.run_id, checkpoint.last_seq))
        # The row's stage and next stage drive the plan as much as its manifest does.
        reason = manifest_ok(checkpoint, sealing) or derived.checkpoint_disagreement(
            checkpoint, sealing
        )
        if reason:
            problems[checkpoint.id] = reason
    return problems

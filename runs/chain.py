"""The hash chain of a run's events: what an event's hash covers, and the walk that checks it.

Every event's hash is sha256 over its predecessor's hash and the canonical JSON of what the
writer decided (`hashed_content`), so an event changed, removed or inserted outside the append
path shows up as a broken link or a changed hash when `verify_chain` walks the run.

A checkpoint's manifest is brought under the chain too: its sha256 is in the payload of the
VERIFIED event that seals it, so a manifest changed afterwards no longer matches
(`manifest_ok`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from runs import artifacts
from runs.models import Checkpoint, Event, Run

__all__ = [
    "ChainReport",
    "canonical_json",
    "event_hash",
    "hashed_content",
    "manifest_hash",
    "manifest_ok",
    "verify_chain",
]


@dataclass
class ChainReport:
    run_id: int
    checked: int = 0
    ok: bool = True
    first_bad_seq: int | None = None
    problems: list[str] = field(default_factory=list)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def event_hash(prev_hash: str, content: dict[str, Any]) -> str:
    return hashlib.sha256((prev_hash + canonical_json(content)).encode()).hexdigest()


def hashed_content(event: Event) -> dict[str, Any]:
    # created_at is set by the database clock and is not part of the chain; everything the
    # writer decided is.
    return {
        "run": event.run_id,
        "seq": event.seq,
        "stage": event.stage,
        "type": event.type,
        "inputs": event.inputs,
        "payload": event.payload,
        "payload_ref": event.payload_ref,
        "artifacts": event.artifacts,
        "idempotency_key": event.idempotency_key,
        "actor": event.actor,
        "token": event.token,
    }


def manifest_hash(manifest: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(manifest).encode()).hexdigest()


def manifest_ok(checkpoint: Checkpoint, verified: Event | None) -> str:
    """Why `checkpoint`'s manifest is not the one its VERIFIED event recorded, or "" when it
    is. `verified` is the run's event at the checkpoint's seq (None when there is none)."""
    if verified is None or verified.type != Event.Type.VERIFIED:
        return f"its VERIFIED event (seq {checkpoint.last_seq}) is missing"
    payload = verified.payload
    if verified.payload_ref:
        try:
            payload = json.loads(artifacts.read(verified.payload_ref))
        except (artifacts.ArtifactMissing, ValueError) as exc:
            return f"its VERIFIED event's payload cannot be read ({exc})"
    recorded = payload.get("manifest_sha256") if isinstance(payload, dict) else None
    if not recorded:
        return f"its VERIFIED event (seq {checkpoint.last_seq}) records no manifest hash"
    if recorded != manifest_hash(checkpoint.manifest):
        return (
            f"its manifest was changed: it no longer matches the hash its VERIFIED event "
            f"(seq {checkpoint.last_seq}) recorded"
        )
    return ""


def verify_chain(run_id: int, *, batch: int = 2000) -> ChainReport:
    """Walk a run's events in seq order and recompute every hash. A gap, a broken link or a
    changed row (edited outside the application) is reported with its seq; so is a checkpoint
    whose manifest no longer matches its VERIFIED event."""
    report = ChainReport(run_id=run_id)
    verified: dict[int, Event] = {}
    prev_hash, expected_seq = "", 1
    last_seq = 0
    while True:
        chunk = list(Event.objects.filter(run_id=run_id, seq__gt=last_seq).order_by("seq")[:batch])
        if not chunk:
            break
        for event in chunk:
            report.checked += 1
            problem = ""
            if event.seq != expected_seq:
                problem = f"seq {event.seq} follows {expected_seq - 1}: a gap"
            elif event.prev_hash != prev_hash:
                problem = f"seq {event.seq} does not link to its predecessor's hash"
            elif event_hash(prev_hash, hashed_content(event)) != event.hash:
                problem = f"seq {event.seq} was altered: its content no longer matches its hash"
            if problem and report.ok:
                report.ok, report.first_bad_seq = False, event.seq
            if problem:
                report.problems.append(problem)
            if event.type == Event.Type.VERIFIED:
                verified[event.seq] = event
            prev_hash, expected_seq = event.hash, event.seq + 1
            last_seq = event.seq
    for checkpoint in Checkpoint.objects.filter(run_id=run_id).order_by("last_seq"):
        reason = manifest_ok(checkpoint, verified.get(checkpoint.last_seq))
        if reason:
            report.ok = False
            report.problems.append(f"checkpoint {checkpoint.id}: {reason}")
    head = Run.objects.filter(pk=run_id).values("last_seq", "head_hash").first()
    if head and (head["last_seq"] != last_seq or head["head_hash"] != prev_hash):
        report.ok = False
        report.problems.append(
            f"run head says seq {head['last_seq']}, the log ends at seq {last_seq}"
        )
    return report

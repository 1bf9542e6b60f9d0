"""The hash chain of a run's events: what an event's hash covers, and the walk that checks it.

Every event's hash is sha256 over its predecessor's hash and the canonical JSON of what the
writer decided (`hashed_content`), so an event changed, removed or inserted outside the append
path shows up as a broken link or a changed hash when `verify_chain` walks the run.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from runs.models import Event, Run

__all__ = ["ChainReport", "canonical_json", "event_hash", "hashed_content", "verify_chain"]


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


def verify_chain(run_id: int, *, batch: int = 2000) -> ChainReport:
    """Walk a run's events in seq order and recompute every hash. A gap, a broken link or a
    changed row (edited outside the application) is reported with its seq."""
    report = ChainReport(run_id=run_id)
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
            prev_hash, expected_seq = event.hash, event.seq + 1
            last_seq = event.seq
    head = Run.objects.filter(pk=run_id).values("last_seq", "head_hash").first()
    if head and (head["last_seq"] != last_seq or head["head_hash"] != prev_hash):
        report.ok = False
        report.problems.append(
            f"run head says seq {head['last_seq']}, the log ends at seq {last_seq}"
        )
    return report

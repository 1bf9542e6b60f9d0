"""What `verify_chain` proves about a run, checked from the database and, optionally, from a
signed digest of the heads kept where the database writer cannot reach.

    the chain ........ every event's hash, link and seq (chain.py)
    checkpoints ...... each manifest is the one its VERIFIED event hashed, and the row names
                       that event's stage and next stage (derived.py)
    effects .......... each effect row is what its events, folded, say (derived.py)
    the head ......... the run row's head is the log's last event, and its anchor is the HMAC
                       under RESUMER_CHAIN_KEY
    past the head .... no checkpoint, effect or artifact of the run refers past its head (what
                       a rollback of the events leaves behind)
    a digest ......... `--against DIGEST`: every head the digest saw is still in the log, at or
                       before the head now (a rollback to an older, once-valid state)
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from runs.events import read
from runs.ledger import derived
from runs.ledger.chain import canonical_json, event_hash, hashed_content, head_anchor, manifest_ok
from runs.models import Artifact, Checkpoint, Effect, Event, Run

__all__ = [
    "ANCHORS_NOT_CHECKED",
    "ChainReport",
    "DigestError",
    "load_digest",
    "make_digest",
    "verify_chain",
]

ANCHORS_NOT_CHECKED = "anchors not checked: RESUMER_CHAIN_KEY is not set"


@dataclass
class ChainReport:
    run_id: int
    checked: int = 0
    ok: bool = True
    first_bad_seq: int | None = None
    problems: list[str] = field(default_factory=list)
    # False when RESUMER_CHAIN_KEY is not set: the head's anchor was not (could not be) checked,
    # and `notes` says so.
    anchors_checked: bool = False
    notes: list[str] = field(default_factory=list)

    def fail(self, problem: str, seq: int | None = None) -> None:
        if self.ok and seq is not None:
            self.first_bad_seq = seq
        self.ok = False
        self.problems.append(problem)


@dataclass
class _Walk:
    last_seq: int = 0
    head_hash: str = ""
    head_event: Event | None = None
    verified: dict[int, Event] = field(default_factory=dict)
    keyed: list[Event] = field(default_factory=list)
    # Every artifact uri an event of the log names: a VERIFIED event's artifacts, the large
    # bodies an exchange kept as artifacts.
    named: set[str] = field(default_factory=set)


def _named_artifacts(event: Event) -> Iterator[str]:
    yield from event.artifacts or ()
    yield from read(event).body_refs()


def _events(run_id: int, batch: int) -> Iterator[Event]:
    last = 0
    while True:
        chunk = list(Event.objects.filter(run_id=run_id, seq__gt=last).order_by("seq")[:batch])
        if not chunk:
            return
        yield from chunk
        last = chunk[-1].seq


def _walk(run_id: int, report: ChainReport, batch: int) -> _Walk:
    """Recompute every hash in seq order; keep what the later checks need."""
    walk, expected = _Walk(), 1
    for event in _events(run_id, batch):
        report.checked += 1
        if event.seq != expected:
            report.fail(f"seq {event.seq} follows {expected - 1}: a gap", event.seq)
        elif event.prev_hash != walk.head_hash:
            report.fail(f"seq {event.seq} does not link to its predecessor's hash", event.seq)
        elif event_hash(walk.head_hash, hashed_content(event)) != event.hash:
            report.fail(
                f"seq {event.seq} was altered: its content no longer matches its hash", event.seq
            )
        if event.type == Event.Type.VERIFIED:
            walk.verified[event.seq] = event
        if event.idempotency_key:
            walk.keyed.append(event)
        walk.named.update(_named_artifacts(event))
        walk.head_hash, expected, walk.last_seq = event.hash, event.seq + 1, event.seq
        walk.head_event = event
    return walk


def _check_checkpoints(run_id: int, report: ChainReport, walk: _Walk) -> None:
    for checkpoint in Checkpoint.objects.filter(run_id=run_id).order_by("last_seq"):
        if checkpoint.last_seq > walk.last_seq:
            report.fail(
                f"checkpoint {checkpoint.id} seals seq {checkpoint.last_seq}, past the log's "
                f"last event (seq {walk.last_seq}): its events are gone"
            )
            continue
        sealing = walk.verified.get(checkpoint.last_seq)
        reason = manifest_ok(checkpoint, sealing) or derived.checkpoint_disagreement(
            checkpoint, sealing
        )
        if reason:
            report.fail(f"checkpoint {checkpoint.id}: {reason}")


def _check_effects(run_id: int, report: ChainReport, walk: _Walk) -> None:
    """Each effect row against its events: this run's first (one walk, already read), then,
    for a row they do not explain, every run's events with its key (another run may have
    written it: a branch re-using its parent's key)."""
    own = derived.fold(walk.keyed)
    for effect in Effect.objects.filter(run_id=run_id).order_by("id"):
        reason = derived.effect_disagreement(effect, own.get(effect.delivery_key))
        if reason:
            everywhere = derived.fold(
                Event.objects.filter(idempotency_key=effect.delivery_key).order_by("id")
            )
            reason = derived.effect_disagreement(effect, everywhere.get(effect.delivery_key))
        if reason:
            report.fail(reason)


def _check_artifacts(run_id: int, report: ChainReport, walk: _Walk) -> None:
    """An artifact stamped no earlier than the head event, and named by no event of the log,
    belongs to events that are gone.

    The clock alone cannot tell: a run's end writes its last artifacts in its last events'
    transaction, and SQLite reads its clock per statement, so they may be stamped after the
    head they ride with. The log's own naming is exact; the clock only narrows which rows to
    ask about, so that an artifact stored just before a worker died (its event never written,
    the sweeper's INTERRUPTED after it) is not taken for tampering."""
    if walk.head_event is None:
        return
    late = Artifact.objects.filter(run_id=run_id, created_at__gte=walk.head_event.created_at)
    orphans = [a for a in late.order_by("id") if a.uri not in walk.named]
    for artifact in orphans[:5]:
        report.fail(
            f"artifact {artifact.uri} was written after the run's last event (seq "
            f"{walk.last_seq}): it belongs to events that are gone"
        )


def _check_head(run_id: int, report: ChainReport, walk: _Walk) -> None:
    head = Run.objects.filter(pk=run_id).values("last_seq", "head_hash", "head_anchor").first()
    if head and (head["last_seq"] != walk.last_seq or head["head_hash"] != walk.head_hash):
        report.fail(f"run head says seq {head['last_seq']}, the log ends at seq {walk.last_seq}")
    if not settings.RESUMER_CHAIN_KEY:
        report.notes.append(ANCHORS_NOT_CHECKED)
        return
    if not head:
        return
    report.anchors_checked = True
    expected = head_anchor(run_id, head["last_seq"], head["head_hash"])
    if not head["head_anchor"]:
        report.fail(
            "run head carries no anchor: it was written without RESUMER_CHAIN_KEY, "
            "or its anchor was removed"
        )
    elif not hmac.compare_digest(head["head_anchor"], expected):
        report.fail(
            "run head's anchor does not match it under RESUMER_CHAIN_KEY: the head was "
            "rewritten by someone without the key (or under another key)"
        )


def _check_against(run_id: int, report: ChainReport, heads: dict[int, tuple[int, str]]) -> None:
    seen = heads.get(run_id)
    if seen is None:
        return
    seq, hash_ = seen
    at = Event.objects.filter(run_id=run_id, seq=seq).values_list("hash", flat=True).first()
    if at is None:
        report.fail(
            f"the digest saw this run's head at seq {seq}; the log no longer reaches it: "
            "rolled back"
        )
    elif at != hash_:
        report.fail(f"the event at seq {seq} is not the one the digest saw: history rewritten")


def verify_chain(
    run_id: int, *, batch: int = 2000, against: dict[int, tuple[int, str]] | None = None
) -> ChainReport:
    """Every check above on one run (`against`: the heads of a digest, load_digest())."""
    report = ChainReport(run_id=run_id)
    walk = _walk(run_id, report, batch)
    _check_checkpoints(run_id, report, walk)
    _check_effects(run_id, report, walk)
    _check_artifacts(run_id, report, walk)
    _check_head(run_id, report, walk)
    if against is not None:
        _check_against(run_id, report, against)
    return report


# --- the digest of heads ---------------------------------------------------------------------


class DigestError(ValueError):
    pass


def _signature(body: dict[str, Any]) -> str:
    key = settings.RESUMER_CHAIN_KEY
    return hmac.new(key.encode(), canonical_json(body).encode(), "sha256").hexdigest()


def make_digest() -> dict[str, Any]:
    """Every run's head, signed under RESUMER_CHAIN_KEY: written somewhere the database's
    writer cannot change, it lets verify_chain tell a rollback from the real history."""
    if not settings.RESUMER_CHAIN_KEY:
        raise DigestError("a digest is signed under RESUMER_CHAIN_KEY, which is not set")
    heads = {
        str(pk): [seq, hash_]
        for pk, seq, hash_ in Run.objects.order_by("pk").values_list("pk", "last_seq", "head_hash")
    }
    body = {"made_at": timezone.now().isoformat(), "heads": heads}
    return {**body, "signature": _signature(body)}


def load_digest(path: str | Path) -> dict[int, tuple[int, str]]:
    """The heads of a digest file, once its signature holds."""
    try:
        data = json.loads(Path(path).read_text())
        body = {"made_at": data["made_at"], "heads": data["heads"]}
        signature = data["signature"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DigestError(f"{path} is not a digest of heads: {exc}") from exc
    if not settings.RESUMER_CHAIN_KEY:
        raise DigestError("a digest is checked under RESUMER_CHAIN_KEY, which is not set")
    if not hmac.compare_digest(str(signature), _signature(body)):
        raise DigestError(
            f"{path}'s signature does not hold: it was changed or another key made it"
        )
    return {int(pk): (int(seq), str(hash_)) for pk, (seq, hash_) in body["heads"].items()}

"""The hash chain of a run's events: what an event's hash covers, and the walk that checks it.

Every event's hash is sha256 over its predecessor's hash and the canonical JSON of what the
writer decided (`hashed_content`), so an event changed, removed or inserted outside the append
path shows up as a broken link or a changed hash when `verify.verify_chain` walks the run.

Two things extend the chain past the events themselves:

* a checkpoint's manifest: its sha256 is in the payload of the VERIFIED event that seals it, so
  a manifest changed afterwards no longer matches (`manifest_ok`);
* the run's head: the chain alone cannot tell a log rewritten end to end (every later hash and
  the head recomputed) from the real one. The append path therefore stores an HMAC of the head
  under RESUMER_CHAIN_KEY, a key the database never holds (`head_anchor`). Someone who can write
  to the database but lacks the key cannot produce the anchor of a head they made up. It does
  not help against someone who has the key, nor against a rollback of the whole database (or of
  one run's rows, anchor included) to an older state the application itself wrote, nor against
  a run deleted outright.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from django.conf import settings

from runs.events import Unreadable, read
from runs.ledger.canonical import CANONICAL, canonical_json
from runs.models import Checkpoint, Event

__all__ = [
    "canonical_json",
    "digest",
    "encoded_event_hash",
    "event_hash",
    "hashed_content",
    "head_anchor",
    "manifest_hash",
    "manifest_ok",
]


def digest(value: Any) -> str:
    """The sha256 (hex) of a value's canonical JSON: the one way a JSON value is fingerprinted
    (a checkpoint's manifest, a plan, a tool call's request)."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def event_hash(prev_hash: str, content: dict[str, Any]) -> str:
    return hashlib.sha256((prev_hash + canonical_json(content)).encode()).hexdigest()


def encoded_event_hash(
    *,
    prev_hash: str,
    run_id: int,
    seq: int,
    stage: str,
    type: str,
    inputs: str,
    payload: str,
    payload_ref: str,
    artifacts: str,
    idempotency_key: str,
    actor: str,
    token: int | None,
) -> str:
    """event_hash(prev_hash, hashed_content(event)) for an event whose JSON fields (inputs,
    payload, artifacts) are already canonical JSON text: the append path has them encoded
    for the insert, and encoding the payload a second time, inside the content, cost every
    append as much again. The text is the one canonical_json() gives the content: keys in
    sorted order, each value encoded alone (test_ledger checks the two agree). Its keywords
    are the event row's columns (sql/shapes.py's EventRow), so a row's fields can be passed
    as they are."""
    enc = CANONICAL.encode
    # The encoder takes a fast path for a str only; an int goes through a new iterencode
    # each time, three per event, where JSON's text for an int is its decimal digits.
    text = (
        f'{{"actor":{enc(actor)},"artifacts":{artifacts},'
        f'"idempotency_key":{enc(idempotency_key)},"inputs":{inputs},"payload":{payload},'
        f'"payload_ref":{enc(payload_ref)},"run":{int(run_id)},"seq":{int(seq)},'
        f'"stage":{enc(stage)},"token":{"null" if token is None else int(token)},'
        f'"type":{enc(type)}}}'
    )
    return hashlib.sha256((prev_hash + text).encode()).hexdigest()


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
    return digest(manifest)


def manifest_ok(checkpoint: Checkpoint, verified: Event | None) -> str:
    """Why `checkpoint`'s manifest is not the one its VERIFIED event recorded, or "" when it
    is. `verified` is the run's event at the checkpoint's seq (None when there is none)."""
    if verified is None or verified.type != Event.Type.VERIFIED:
        return f"its VERIFIED event (seq {checkpoint.last_seq}) is missing"
    try:
        recorded = read(verified, whole=True).manifest_sha256
    except Unreadable as exc:
        return f"its VERIFIED event's payload cannot be read ({exc})"
    if not recorded:
        return f"its VERIFIED event (seq {checkpoint.last_seq}) records no manifest hash"
    if recorded != manifest_hash(checkpoint.manifest):
        return (
            f"its manifest was changed: it no longer matches the hash its VERIFIED event "
            f"(seq {checkpoint.last_seq}) recorded"
        )
    return ""


def head_anchor(run_id: int, last_seq: int, head_hash: str) -> str:
    """HMAC-SHA256 of the run's head under RESUMER_CHAIN_KEY; "" when no key is set."""
    key = settings.RESUMER_CHAIN_KEY
    if not key:
        return ""
    keyed = _KEYED.get(key)
    if keyed is None:
        # The key's two padded blocks, hashed once per key (a setting, one or two per
        # process): every append moves the anchor, and hmac.new() hashes them again each time.
        keyed = _KEYED[key] = hmac.new(key.encode(), digestmod=hashlib.sha256)
    anchor = keyed.copy()
    anchor.update(f"{run_id}:{last_seq}:{head_hash}".encode())
    return anchor.hexdigest()


_KEYED: dict[str, hmac.HMAC] = {}

"""What the vendors' SQL writes, in the order it writes it: an event row (`EventRow`), the
column orders of the rows that ride with an event (an effect's intent or outcome, a stage's
checkpoint and artifact rows), and those riders themselves. base.py's `AppendSQL` and each
vendor's class take and write these; nothing here runs SQL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from runs.ledger.canonical import canonical_json

__all__ = [
    "ARTIFACT_COLUMNS",
    "CHECKPOINT_COLUMNS",
    "EFFECT_COLUMNS",
    "EVENT_COLUMNS",
    "HEAD_COLUMNS",
    "JSON_COLUMNS",
    "SETTLE_COLUMNS",
    "CheckpointSeal",
    "EffectClaim",
    "EffectSettle",
    "EffectWrite",
    "EventRow",
    "KeyTaken",
    "Moves",
    "Write",
    "Written",
    "guard",
]


class EventRow(NamedTuple):
    """An event row as every insert writes it: its fields are the insert's columns, in
    order. The JSON columns hold the canonical text the event's hash covers."""

    run_id: int
    seq: int
    stage: str
    type: str
    inputs: str
    payload: str
    payload_ref: str
    artifacts: str
    idempotency_key: str
    actor: str
    token: int | None
    prev_hash: str
    hash: str


EVENT_COLUMNS: tuple[str, ...] = EventRow._fields

# Head moves: run column -> value, or Now() for the database clock.
Moves = dict[str, Any]
# What a write returns: the event's id and created_at (as the database returned it, None when
# it cannot), and what its rider wrote: the effect's id, or the sealed checkpoint's created_at
# as the database returned it (None without either).
Written = tuple[int, Any, Any]

# A new effect row (its intent), in this order; created_at and updated_at are the database's.
EFFECT_COLUMNS = (
    "delivery_key",
    "run_id",
    "stage",
    "call_id",
    "tool",
    "policy",
    "target",
    "request_hash",
    "request",
    "status",
    "external_id",
    "result",
    "error",
    "attempts",
    "cost",
)
# What an outcome sets on an effect row, in this order.
SETTLE_COLUMNS = ("status", "external_id", "result", "error", "cost")
# A checkpoint's row as a seal writes it (its created_at is the database's); last_seq is the
# seq of the event it is sealed on.
CHECKPOINT_COLUMNS = ("id", "run_id", "last_seq", "stage", "next_stage", "manifest")
# An artifact row as a seal writes it, when its version is known before the write.
ARTIFACT_COLUMNS = ("name", "version", "sha256", "size", "content_type", "blob", "run_id")
JSON_COLUMNS = frozenset({"inputs", "payload", "artifacts", "request", "result", "manifest"})
# What every append moves; an append that moves only these leaves the run's updated_at.
HEAD_COLUMNS = frozenset({"last_seq", "head_hash", "head_anchor"})


@dataclass(frozen=True, slots=True)
class EffectClaim:
    """An effect's intent, claiming its delivery key: written with its event, or neither is
    (the key is taken: the caller reads the existing effect and decides what to do)."""

    fields: dict[str, Any]  # EFFECT_COLUMNS by name, Python values


@dataclass(frozen=True, slots=True)
class EffectSettle:
    """An effect's outcome, written with its event."""

    pk: int
    fields: dict[str, Any]  # SETTLE_COLUMNS by name, Python values


EffectWrite = EffectClaim | EffectSettle


@dataclass(frozen=True, slots=True)
class CheckpointSeal:
    """A stage's checkpoint, sealed on the VERIFIED event it is written with (its last_seq is
    that event's seq): in the event's transaction on SQLite, in its very statement on
    PostgreSQL, so neither is ever observed without the other. `artifacts` are the rows of
    the artifacts its manifest names, when their versions are known before the write
    (ARTIFACT_COLUMNS' values): written with it, or the write fails (IntegrityError) with
    nothing written when a version is taken."""

    id: str
    stage: str
    next_stage: str
    manifest: dict[str, Any]
    artifacts: tuple[tuple[Any, ...], ...] = ()

    def checkpoint_params(self, row: EventRow) -> list[Any]:
        """CHECKPOINT_COLUMNS' values for a seal on `row`; the manifest as canonical text."""
        return [
            self.id,
            row.run_id,
            row.seq,
            self.stage,
            self.next_stage,
            canonical_json(self.manifest),
        ]


@dataclass(frozen=True, slots=True)
class Write:
    """One append's write, as every vendor's `write*` takes it: the event's row and the head
    it moves, and what rides with them, written only once the fence held. `effect`, an
    effect row (never with a stage's end); `seal`, the checkpoint sealed on the event;
    `then`, the event that follows it, the run's last (`moves` already move the head past
    it); `release`, the writer's lease given up last. `flush=False`: the commit may return
    before it reaches the disk (append() says which writes may)."""

    row: EventRow
    moves: Moves
    effect: EffectWrite | None = None
    seal: CheckpointSeal | None = None
    release: bool = False
    then: EventRow | None = None
    flush: bool = True


class KeyTaken(Exception):
    """The claimed delivery key has an effect already: nothing was written."""


def guard(row: EventRow) -> tuple[int, int | None, int, str]:
    """The fence's parameters for a guarded write of `row`, in the order `AppendSQL.fence`
    and the head check after it take them: the run, the writer's token, and the head the row
    chains to (the seq before it, the hash it links to). The row says all four."""
    return row.run_id, row.token, row.seq - 1, row.prev_hash

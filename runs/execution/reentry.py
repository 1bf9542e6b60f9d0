"""A stage run again in the same run (after a gate's answer, or on a strict resume): what its
earlier attempts recorded is what it goes on with (runs/planning/replay_log.py).

Each call id it made before is looked up at its first use in this attempt: a SAFE call's
recorded result is replayed (durable_call.py returns it), an effect's comes back through the
effect ledger by its key, and a request that differs from the recorded one is a divergence,
recorded as DIVERGED. Where the call costs money or is never guessed about
(replay.guards_divergence) the stage stops before it, for a human, unless the pipeline chose
to record and go on (pipeline.OnDivergence). The values a stage takes from the world, now()
and uuid(), are recorded on first use and replayed the same way, so a clock in a prompt
keeps the prompt what it was.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from runs.events import Diverged, NeedsApproval, ValueRecorded
from runs.execution.stage_state import StageState, StageStopped
from runs.ledger.append import RunMove, append
from runs.models import Run
from runs.pipeline import OnDivergence, Tool
from runs.planning.replay import StopKind, guards_divergence
from runs.planning.replay_log import DIFF_ENTRIES, Divergence, RecordedCall, differences


class Reentry:
    def __init__(self, state: StageState) -> None:
        self.state = state
        # The call ids this attempt has asked for: a recorded call is replayed (and checked
        # for divergence) at its first use in an attempt; asked for again in the same
        # attempt (a poll), it is a new call.
        self._asked: set[str] = set()
        # How many of each kind of value this attempt has taken ("now" -> 2).
        self._taken: dict[str, int] = {}

    def first_use(
        self, call_id: str, tool: Tool, key: str, args: dict[str, Any]
    ) -> RecordedCall | None:
        """What an earlier attempt recorded under `call_id`, at its first use in this attempt
        (None after it, or when nothing was); a divergence from it is recorded first, and
        stops the stage where it must (StageStopped)."""
        if call_id in self._asked:
            return None
        self._asked.add(call_id)
        log = self.state.replayed()
        divergence = log.check(call_id, key, args, tool.name)
        if divergence is not None:
            self._diverged(call_id, tool, args, divergence)
        return log.calls.get(call_id)

    def _diverged(
        self, call_id: str, tool: Tool, args: dict[str, Any], divergence: Divergence
    ) -> None:
        stop = guards_divergence(tool, args) and self._stops()
        said = (
            f"{tool.name} ({self.state.spec.name}/{call_id}) was asked for again with another "
            f"request than this run recorded ({_said(divergence.diff)})"
        )
        self._record(
            call_id,
            stop,
            f"{said}; nothing was sent" if stop else f"{said}; made with the new request",
            idempotency_key=divergence.key,
            tool=tool.name,
            policy=tool.policy,
            recorded_key=divergence.recorded.key,
            diff=divergence.diff,
        )

    def question_changed(
        self, gate_id: str, answered: dict[str, Any], asked: dict[str, Any]
    ) -> None:
        """A question this run answered under `gate_id`, asked again showing something else
        (its heading, details or values): a value that differs each time the stage runs (a
        clock, a random id) would ask it forever. Recorded as a divergence; the stage stops
        for a human unless the pipeline records and goes on, when it is asked anew."""
        diff = differences(answered, asked)[:DIFF_ENTRIES]
        stop = self._stops()
        said = (
            f"the question {self.state.spec.name}/{gate_id} was asked again showing other than "
            f"what its answer was given to ({_said(diff)})"
        )
        reason = f"{said}; not asked again" if stop else f"{said}; asked again"
        self._record(gate_id, stop, reason, tool="", policy="", diff=diff)

    def _stops(self) -> bool:
        return self.state.pipeline.divergence(self.state.spec.name) == OnDivergence.STOP

    def _record(self, call_id: str, stop: bool, said: str, **fields: Any) -> None:
        """DIVERGED, and where the stage stops, the stop for a human with it."""
        state = self.state
        stage = state.spec.name
        reason = (
            f"{said}: a strict resume would ask the same, so start a new branch, which runs "
            "the stage afresh, or close the run out"
            if stop
            else said
        )
        event = Diverged(stage=stage, call=call_id, stopped=stop, reason=reason, **fields)
        if state.contract is not None and not state.deviated:
            # The plan counted on what this call recorded: asking another request departs
            # from it, whether or not the stage goes on.
            state.deviate(reason)
        if not stop:
            append(state.writer, event)
            return
        stopping = NeedsApproval(
            stage=stage,
            idempotency_key=fields.get("idempotency_key", ""),
            error=reason,
            kind=StopKind.DIVERGED,
            call=call_id,
        )
        with transaction.atomic():
            append(state.writer, event)
            append(state.writer, stopping, move=RunMove(Run.Status.NEEDS_APPROVAL))
        raise StageStopped(reason)

    # Values taken from the world ----------------------------------------------------------

    def now(self) -> datetime:
        return datetime.fromisoformat(self._value("now", lambda: datetime.now(UTC).isoformat()))

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self._value("uuid", lambda: str(uuid.uuid4())))

    def _value(self, kind: str, take: Any) -> str:
        """The how-manieth value of `kind` this attempt asks for: the one an earlier attempt
        recorded under that name, else a new one, recorded before the stage sees it."""
        count = self._taken[kind] = self._taken.get(kind, 0) + 1
        name = f"{kind}-{count}"
        recorded = self.state.replayed().values.get(name)
        if recorded is not None:
            return recorded
        value = take()
        # Need not wait for the disk: a later write that does (an intent, the checkpoint)
        # takes it there first, and lost with everything after it, the value is taken anew
        # by a stage that recorded nothing that used it.
        append(
            self.state.writer, ValueRecorded(stage=self.state.spec.name, name=name, value=value),
            flush=False,
        )  # fmt: skip
        return value


def _said(diff: list[dict[str, Any]]) -> str:
    """How many differences, and where the first is: the request's own, not the key's that
    follows from it."""
    paths = [d["path"] for d in diff]
    first = next((p for p in paths if p != "key"), paths[0] if paths else "request")
    return f"{len(paths)} difference{'s' if len(paths) != 1 else ''}, first at {first}"

"""Ask again: a gate whose answer led nowhere opens again, and its person answers anew.

A human confirmed a call (approved it, maybe with an edited amount); the call was made with
that answer and the target refused it (an amount over the account's limit, a card declined):
nothing happened there, and the stage failed. A resume would send the very request the
target refused, so the plan does not offer one (runs/planning/replay.py: the refused
request a human confirmed blocks it). The way out is to ask the human again: the gate
reopens (GATE_REOPENED, the run waits again) showing the refused attempt, who answered it
and what the target said; the next answer's call is made under a key revision of its own
(runs/execution/asking.py), distinct from every refused attempt's even when its arguments
are the same. A question whose answer sent its stage back ("request changes", sent_back.py)
reopens the same way, showing that answer; the stage reads the new one. The other way out
is to close the run out (runs/planning/close_out.py).

    refused()          the one rule: this failed effect is the target's refusal of the
                       request this gate's answer confirmed
    confirmed_calls()  that rule over a run's newest effects (the planner, with its fold)
    refusals()         the refused confirmed calls of a stopped run
    askable()          those and the question that sent its stage back: what Ask again
                       offers (the run page, the API, `manage.py ask_again`)
    ask_again()        reopen one, under the run's lock and a lease, as an answer is recorded
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction

from runs.gates import rows as gate_rows
from runs.gates.sent_back import failed_on
from runs.ledger import derived, leases
from runs.ledger.append import Writer
from runs.ledger.derived import Derived
from runs.models import Effect, EffectStatus, Gate, GateKind, GateStatus, Run


class AskAgainRefused(Exception):
    """Nothing was written; the message says why."""


@dataclass(frozen=True)
class Refusal:
    """A confirmed call its target refused: the gate whose answer made the request, and the
    failed effect that recorded the refusal."""

    gate: Gate
    effect: Effect

    @property
    def by(self) -> str:
        return self.gate.answered_by

    @property
    def error(self) -> str:
        return self.effect.error

    @property
    def attempt(self) -> int:
        """Which attempt was refused: 1 for the first answer, 2 after one Ask again..."""
        return len(self.gate.attempts) + 1


def refused(gate: Gate | None, effect: Effect, said: Derived | None) -> bool:
    """Whether `effect` is the target's refusal of the request `gate`'s answer confirmed: the
    effect failed as the engine recorded it (not a supervisor's edit: `said`, what its
    events say), and its request is the answer's arguments."""
    return (
        gate is not None
        and gate.kind == GateKind.CONFIRM
        and gate.status == GateStatus.ANSWERED
        and bool(gate.approved)
        and effect.status == EffectStatus.FAILED
        and said is not None
        and said.status == EffectStatus.FAILED
        and not said.edited_by
        and effect.request == (gate.answer or {}).get("args")
    )


def confirmed_calls(
    run: Run, effects: Iterable[Effect], said: dict[str, Derived] | None = None
) -> dict[str, Refusal]:
    """Delivery key -> the refusal, for those of `effects` (the newest per call) that are a
    target's refusal of a request a human confirmed on this run. `said` is what the effects'
    events say (derived.fold), when the caller folded them already."""
    failed = [e for e in effects if e.status == EffectStatus.FAILED]
    if not failed:
        return {}
    gates: dict[tuple[str, str], list[Gate]] = {}
    for gate in Gate.objects.filter(
        run=run,
        kind=GateKind.CONFIRM,
        status=GateStatus.ANSWERED,
        gate_id__in={e.call_id for e in failed},
    ):
        gates.setdefault((gate.stage, gate.gate_id), []).append(gate)
    if said is None:
        said = derived.said_of([run.pk], failed)
    found = {}
    for effect in failed:
        for gate in gates.get((effect.stage, effect.call_id), []):
            if refused(gate, effect, said.get(effect.delivery_key)):
                found[effect.delivery_key] = Refusal(gate, effect)
    return found


def refusals(run: Run, effects: list[Effect] | None = None) -> list[Refusal]:
    """The confirmed calls of a stopped run that their targets refused, by call: what Ask
    again offers. A run that is not stopped (running, waiting, finished, closed) has none.
    `effects`: the run's effects by id, when the caller read them already (the run page)."""
    if not run.is_resumable:
        return []
    newest: dict[tuple[str, str], Effect] = {}
    if effects is None:
        effects = list(Effect.objects.filter(run=run).order_by("id"))
    for effect in effects:
        newest[(effect.stage, effect.call_id)] = effect
    found = confirmed_calls(run, newest.values())
    return sorted(found.values(), key=lambda r: r.effect.pk)


def _why_not(run: Run) -> str:
    if run.is_waiting:
        return f"{run.public_id} is waiting for a decision already: answer its gate"
    if not run.is_resumable:
        return f"{run.public_id} {run.status_said}: nothing to ask again"
    return (
        f"{run.public_id} has no confirmed call that its target refused, nor a question "
        "whose answer sent its stage back: nothing to ask again (its plan says how it may go "
        "on)"
    )


def _gates(offered: list[tuple[Gate, Effect | None]]) -> str:
    return ", ".join(f"gate {g.pk} ({g.stage}/{g.gate_id})" for g, _ in offered)


def askable(run: Run) -> list[tuple[Gate, Effect | None]]:
    """What Ask again may reopen on a stopped run: each confirmation whose call its target
    refused, with the refusal's effect, and the gate whose answer its stage failed on (a
    question that sent it back, a confirmation rejected: sent_back.py), with none."""
    found: list[tuple[Gate, Effect | None]] = [(r.gate, r.effect) for r in refusals(run)]
    back = failed_on(run)
    if back is not None:
        found.append((back.gate, None))
    return found


def ask_again(run_pk: int, *, actor: str, gate_pk: int | None = None) -> Gate:
    """Reopen a gate of askable() (`gate_pk`, or the run's only one): GATE_REOPENED with the
    earlier attempt, the gate open again without an answer, the run waiting. Raises
    AskAgainRefused, having written nothing."""
    with transaction.atomic():
        run = Run.locked(run_pk, missing=AskAgainRefused)
        offered = askable(run)
        found = [(g, e) for g, e in offered if gate_pk is None or g.pk == gate_pk]
        if not found and offered:
            # Another gate than the one it can ask: said, with the ones it can.
            raise AskAgainRefused(
                f"gate {gate_pk} is not one {run.public_id} can ask again (it has no confirmed "
                "call that its target refused, nor a question that sent its stage back, "
                f"there); it can ask {_gates(offered)}"
            )
        if not found:
            raise AskAgainRefused(_why_not(run))
        if len(found) > 1:
            raise AskAgainRefused(
                f"{run.public_id} has {len(found)} gates to ask again: name one ({_gates(found)})"
            )
        asked, effect = found[0]
        gate = Gate.objects.select_for_update().get(pk=asked.pk)
        with leases.taken_over(run.pk, actor) as token:
            gate_rows.reopen(Writer(run.pk, token, actor), gate, effect)
    return gate

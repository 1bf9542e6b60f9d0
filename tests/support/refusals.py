"""A confirmed charge its target refused, made in this process (the engine called inline, the
card processor the real demo service): the world the ways out of a failed answer start from
(runs/gates/reopen.py, runs/planning/close_out.py). The pipeline is tests/gates/pipelines.py's
`gate-charge`, registered by the caller (tests.support.pipelines.registered). And the demo's
review answered "request changes" (`sent_back_review`), whose stage failed on it."""

from __future__ import annotations

from demo import faults
from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.gates import answers
from runs.gates.acts import TICK
from runs.models import Gate, Run

SUPERVISOR = frozenset({"supervisor"})
# Over the demo card processor's default limit (demo_service.models.DEFAULT_CARD_LIMIT), and
# within the demo's ceiling for an edit (demo/pipeline.py's PROMOTION_CEILING).
OVER_LIMIT = "75.00"


def waiting_charge() -> Gate:
    """A gate-charge run waiting at its fee's confirmation."""
    run = engine.start_run("gate-charge", {}, actor="test", enqueue=False)
    run_inline(run.pk)
    return Gate.objects.get(run=run, gate_id="fee")


def confirm(gate: Gate, amount: str | None = None, *, by: str = "sam") -> Run:
    """Approve the charge (with `amount`, an edit) and run the stage again: the run as it
    ends."""
    data = {"decision": "approve", TICK: "on", **({"arg_amount": amount} if amount else {})}
    answers.answer(gate.pk, data, actor=by, roles=SUPERVISOR)
    return run_inline(gate.run_id)


def refused_charge(amount: str = OVER_LIMIT) -> Run:
    """A run whose supervisor approved a charge the card processor declined: failed."""
    run = confirm(waiting_charge(), amount)
    assert run.status == Run.Status.FAILED, run.status
    return run


def unknown_charge() -> Run:
    """A confirmed charge whose answer never came: the run failed, the effect unknown."""
    run = faults.start_run(
        "gate-charge", {}, actor="test", faults={"timeout": "pay/fee/after"}, enqueue=False
    )
    run_inline(run.pk)
    run = confirm(Gate.objects.get(run=run, gate_id="fee"))
    assert run.status == Run.Status.FAILED, run.status
    return run


def sent_back_review(decision: str = "request_changes", notes: str = "") -> Run:
    """The demo's content run with review on, its review answered `decision` (with `notes`),
    run on: with "request changes", publish fails on the answer (runs/gates/sent_back.py)."""
    run = run_inline(engine.start_run("content", {"review": "on"}, actor="t", enqueue=False).pk)
    gate = Gate.objects.get(run=run, gate_id="review")
    answer = {**gate.initial, "decision": decision, "notes": notes}
    answers.answer(gate.pk, answer, actor="user:ana", roles={"operator"})
    return run_inline(run.pk)

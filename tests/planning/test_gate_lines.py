"""The plan's line for a confirmation not asked yet (runs/planning/gate_lines.py): it says a
condition decides whether it is asked only when the confirmation has one (`when=`)."""

from __future__ import annotations

import pytest

from runs import engine
from runs.pipeline import registry
from runs.planning.gate_lines import strict_lines
from tests.support.pipelines import registered

pytestmark = pytest.mark.django_db

REFUNDS = "tests.planning.test_rejected_call_plan.refunds"


def line_of(run, stage: str, gate: str):
    pipeline = registry.get(run.pipeline)
    return next(g for g in strict_lines(run, pipeline, [stage]) if g.gate_id == gate)


def test_a_confirmation_without_a_condition_is_said_to_be_asked_unconditionally(settings):
    with registered(settings, REFUNDS):
        run = engine.start_run("refund-rejected", {}, actor="t", enqueue=False)

        said = line_of(run, "pay", "refund-1").said

    assert said == "asks an operator to confirm the call before it is made"


def test_a_confirmation_with_a_condition_says_it_holds_only_if_it_does(facts):
    run = engine.start_run("content", {}, actor="t", enqueue=False)

    said = line_of(run, "publish", "promote-charge").said

    assert said == "asks a supervisor to confirm the call before it is made, if its condition holds"

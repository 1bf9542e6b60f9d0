"""The crash matrix: a crash anywhere costs nothing but the unfinished step.

For every expected tool call of every stage of the demo pipeline, the worker is killed hard
before the call and after it (before its result is recorded); the sweeper interrupts the run,
the plan is approved as a strict resume, and the run must end with every invariant of
tests/faults/matrix.py holding. Around every gate of a reviewed run (before it is asked,
after its answer, between a confirmation's answer and its call) the same, with the gates
answered as they come, and no gate asked twice or answered twice. Plain `make test` runs a
representative subset (one gate case); the whole matrix runs with RESUMER_FULL_MATRIX=1
(`make faults`), and tests/faults/run_matrix.py prints it.
"""

from __future__ import annotations

import pytest

from tests.faults import matrix

pytestmark = [pytest.mark.faults, pytest.mark.workers]


def _params() -> list:
    full = matrix.full_matrix()
    return [
        pytest.param(
            case,
            id=case.id,
            marks=()
            if full or case.id in matrix.REPRESENTATIVE
            else pytest.mark.skip(reason="full matrix only: RESUMER_FULL_MATRIX=1 (make faults)"),
        )
        for case in matrix.all_cases()
    ]


@pytest.mark.parametrize("case", _params())
def test_a_crash_costs_only_the_unfinished_step(case, workers, reference):
    result = matrix.run_case(case, workers, reference)
    assert result.passed, result.describe()

"""The suite's worker processes (tests/support/processes.py): a worker started in a test's own
environment (its pipelines, an SDK's example on PYTHONPATH) is forked from a server kept for
that environment, not a new interpreter that imports Django and the SDKs again."""

from __future__ import annotations

import pytest

from tests.support import forkserver

pytestmark = pytest.mark.skipif(
    not forkserver.enabled(), reason="RESUMER_TEST_FORK_WORKERS=0 starts every worker anew"
)


def test_workers_started_in_a_tests_own_environment_are_forked_from_one_server(workers):
    own = {"RESUMER_TEST_OWN_ENVIRONMENT": "a test's own"}

    first = workers.start("own-1", burst=True, env=own)
    second = workers.start("own-2", burst=True, env=own)

    assert isinstance(first, forkserver.ForkedProcess)
    assert second.server is first.server
    # Real workers: each ran RQ's burst loop on the empty queue and exited cleanly.
    assert [proc.wait(timeout=60) for proc in (first, second)] == [0, 0]

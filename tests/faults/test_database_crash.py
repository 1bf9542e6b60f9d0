"""The database crash drill (issue 29), PostgreSQL only: a private cluster crashed a few
times (`pg_ctl stop -m immediate`, then started again) while real workers run demo runs.
tests/faults/database_crash.py runs it in a process of its own, whose Django is set up on the
private cluster, and reports what the database and the demo service hold afterwards.

It takes a while and needs PostgreSQL's binaries, so it runs with `make faults`
(RESUMER_FULL_MATRIX=1) or RESUMER_DB_CRASH_DRILL=1, not in plain `make test`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.faults.database_crash import RESULT
from tests.faults.matrix import full_matrix
from tests.support.postgres import binaries
from tests.support.processes import ROOT

pytestmark = [
    pytest.mark.faults,
    pytest.mark.workers,
    pytest.mark.skipif(
        not (full_matrix() or os.environ.get("RESUMER_DB_CRASH_DRILL") == "1"),
        reason="the crash drill runs with `make faults` or RESUMER_DB_CRASH_DRILL=1",
    ),
    pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries to run a cluster"),
]


@pytest.mark.parametrize("defer_flush", ["1", "0"], ids=["deferred-flush", "every-commit-flushed"])
def test_database_crashes_under_load_duplicate_nothing_and_leave_no_unstarted_run_waiting(
    defer_flush,
):
    done = subprocess.run(
        [sys.executable, "-m", "tests.faults.database_crash"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        # The suite's PGOPTIONS turns synchronous_commit off (pyproject.toml): a crash would
        # then lose commits the protocol counts on. The drill runs as a deployment does.
        env={**os.environ, "RESUMER_DEFER_FLUSH": defer_flush, "PGOPTIONS": ""},
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print("\n".join(line for line in lines if not line.startswith(RESULT)))
    found = json.loads(next(line for line in lines if line.startswith(RESULT))[len(RESULT) :])
    assert found["crashes"] >= 1
    if defer_flush == "0":
        # Every commit waited for the disk: a crash loses nothing that was committed.
        assert found["deferred_writes_lost"] == 0
    assert found["duplicates"] == []
    assert found["chain_problems"] == []
    assert found["checkpoint_problems"] == []
    assert found["interrupted_before_start"] == []
    assert found["waiting_without_reason"] == []
    assert found["succeeded_without_strict_resume"] == []
    # Every run either succeeded (after a strict resume, if it stopped) or waits for a human.
    assert set(found["statuses"]) <= {"succeeded", "interrupted", "failed", "needs_approval"}

"""What a failed stage leaves the operator (runs/execution/stage_log.py): its traceback and
the log lines its job wrote, bounded, one StageLog row per stage job; nothing for a stage
that verified; the lines a killed worker flushed before its death.

The stage runs in this process with `engine.execute` (committed data, `transactional_db`: the
heartbeat and flusher threads have connections of their own); the killed worker is a forked
child, as seed_demo's.
"""

from __future__ import annotations

import signal

import pytest

from demo.management.commands.seed_demo import run_until_killed
from runs.engine import Outcome
from runs.execution import stage_log
from runs.models import StageLog
from tests.support import failing
from tests.support.pipelines import registered


@pytest.fixture(autouse=True)
def pipeline(transactional_db, settings):
    with registered(settings, failing.PATH):
        yield


def the_log() -> StageLog:
    return StageLog.objects.get()


def test_a_stage_that_raises_stores_its_traceback_and_lines_with_its_job():
    run = failing.start("raise")
    assert failing.execute(run) == Outcome.FAILED

    row = the_log()
    run.refresh_from_db()
    assert (row.run_id, row.stage, row.token, row.outcome) == (
        run.pk,
        "check",
        run.lease.token,
        "failed",
    )
    assert row.worker == "worker:test"
    assert "in reconcile_totals" in row.traceback
    assert row.traceback.rstrip().endswith("ValueError: ledger total 12 != 13 <b>not bold</b>")
    lines = row.lines.splitlines()
    assert "INFO runs.tests.failing checking invoice 1 <script>" in lines[0]
    assert lines[1].endswith("WARNING runs.tests.failing totals disagree")


def test_only_the_newest_lines_are_kept_and_the_rest_counted():
    run = failing.start("verbose")
    failing.execute(run)

    row = the_log()
    lines = row.lines.splitlines()
    assert len(lines) == stage_log.MAX_LINES
    assert any(line.endswith("checking invoice 299") for line in lines)
    assert not any(line.endswith("checking invoice 99") for line in lines)
    # The stage wrote 301 lines; whatever else the job logged after them is kept too.
    others = [line for line in lines if "runs.tests.failing" not in line]
    assert row.dropped + len(lines) == 301 + len(others)


def test_the_lines_kept_fit_in_their_byte_bound_each_line_cut():
    run = failing.start("long-lines")
    failing.execute(run)

    row = the_log()
    assert len(row.lines.encode()) <= stage_log.MAX_BYTES
    lines = row.lines.splitlines()
    assert max(len(line.encode()) for line in lines) <= stage_log.MAX_LINE_BYTES
    huge = next(line for line in lines if " huge " in line)
    assert huge.endswith("yyy" + stage_log.CUT)
    assert row.dropped > 0


def test_a_long_traceback_keeps_its_end():
    run = failing.start("long-traceback")
    failing.execute(run)

    row = the_log()
    marker, _, kept = row.traceback.partition("\n")
    assert marker.startswith("[… ") and marker.endswith("bytes of the traceback's start not kept]")
    assert len(kept.encode()) == stage_log.MAX_TRACEBACK_BYTES
    assert kept.rstrip().endswith("zzz the end")


def test_lines_another_thread_logs_meanwhile_are_not_the_stages():
    run = failing.start("other-thread")
    failing.execute(run)

    row = the_log()
    assert "RuntimeError: the stage's own failure" in row.traceback
    assert "checking invoice 1" in row.lines
    assert "from another thread" not in row.lines


def test_a_stage_that_verifies_keeps_no_log():
    run = failing.start("ok")
    assert failing.execute(run) == Outcome.VERIFIED

    assert not StageLog.objects.exists()


def test_a_running_stage_flushes_its_lines_unfinished_and_a_verified_end_removes_them():
    failing.seen_mid_stage.clear()
    run = failing.start("flush")
    assert failing.execute(run) == Outcome.VERIFIED

    assert len(failing.seen_mid_stage) == 1
    assert failing.seen_mid_stage[0]["outcome"] == ""
    assert "checking invoice 1" in failing.seen_mid_stage[0]["lines"]
    assert not StageLog.objects.exists()


def test_a_killed_worker_leaves_the_lines_it_flushed_without_an_outcome(monkeypatch):
    # The forked child inherits the short flush interval; its flusher thread writes the row.
    monkeypatch.setattr(stage_log, "FLUSH_SECONDS", 0.05)
    run = failing.start("killed")

    assert run_until_killed(run.pk) == -signal.SIGKILL

    row = the_log()
    assert (row.outcome, row.traceback) == ("", "")
    assert "the last words before the kill" in row.lines

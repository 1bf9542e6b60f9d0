"""What a stage job wrote to the log, and the traceback it failed with, kept for the operator
who reads why a run stopped (StageLog rows; the run page shows them to operators and up).

A handler on the root logger takes the records of the stage job's own thread: the sweeper
and the heartbeats log from their own threads of the same process, and are not the stage's.
It takes what the logging configuration lets through (Resumer's `runs` loggers at
RESUMER_LOG_LEVEL, any other logger at its own level, the root's WARNING unless configured)
and lowers no level: a library's INFO lines, an HTTP client's request lines with their
URLs, would be kept too. Bounded: the newest MAX_LINES records within MAX_BYTES (each record
cut at MAX_LINE_BYTES), the last MAX_TRACEBACK_BYTES of the traceback.

When they are stored:

* at the end of the job, by its own thread, when the run is left for a human (the engine's
  KEEP_LOG outcomes). A job that verified, waits at a gate or had nothing to do keeps
  nothing, and deletes what was flushed of it: logs may hold sensitive data, kept only
  where someone has a reason to read them.
* while the stage runs, every FLUSH_SECONDS when new lines came, by one flusher thread per
  process, on its own connection: a flush never joins (or breaks) a stage's transaction and
  costs the stage no statement. So a worker killed mid-stage (SIGKILL, OOM) leaves the
  lines it flushed, up to FLUSH_SECONDS before its death, with `outcome` "". The lines after
  its last flush are lost with it, and there is no traceback: a killed process has none.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.utils import timezone

from runs.models import StageLog

__all__ = ["Capture", "capturing", "flusher"]

log = logging.getLogger("runs.stage_log")

MAX_LINES = 200
MAX_BYTES = 64 * 1024
MAX_LINE_BYTES = 4 * 1024
MAX_TRACEBACK_BYTES = 16 * 1024
# Short enough that a killed worker's last lines are mostly there, long enough that a long
# stage that logs a lot writes its row a dozen times a minute at most (the run page says it).
FLUSH_SECONDS = StageLog.FLUSH_SECONDS
# An exception that escaped the stage job (a bug, a database error that is not an outage):
# RQ records the job as failed, and the sweeper interrupts the run later.
RAISED = "raised"

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
CUT = " […]"


def _head(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - len(CUT.encode())].decode(errors="ignore") + CUT


def _tail(text: str, limit: int) -> str:
    """The end of a traceback: the frame that raised and the exception are last."""
    data = text.encode()
    if len(data) <= limit:
        return text
    marker = f"[… {len(data) - limit} bytes of the traceback's start not kept]\n"
    return marker + data[len(data) - limit :].decode(errors="ignore")


@dataclass(frozen=True)
class Snapshot:
    lines: str
    dropped: int
    traceback: str


class Capture(logging.Handler):
    """The lines and traceback of one stage job, while it runs (see the module's doc)."""

    def __init__(self, run_id: int, stage: str, token: int, attempt: int, worker: str) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(FORMAT))
        self.run_id, self.stage, self.token = run_id, stage, token
        self.attempt, self.worker = attempt, worker
        self.thread = threading.get_ident()
        self.started_at: datetime = timezone.now()
        self.lines: deque[str] = deque()
        self.size = 0
        self.dropped = 0
        self.traceback = ""
        self.outcome: str | None = None
        self.keep = False
        # Between the stage's thread and the flusher's: what is new, whether a flush wrote a
        # row, and whether the job ended. The stage never waits for the flusher: a flush that
        # waits on a lock (SQLite's write lock, a row lock) must not hold the job up.
        self.guard = threading.Lock()
        self.dirty = False
        self.stored = False
        self.closed = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread != self.thread:
            return
        try:
            text = _head(self.format(record), MAX_LINE_BYTES)
        except Exception:
            self.handleError(record)
            return
        with self.guard:
            self.lines.append(text)
            self.size += len(text.encode()) + 1
            while len(self.lines) > MAX_LINES or self.size > MAX_BYTES:
                self.size -= len(self.lines.popleft().encode()) + 1
                self.dropped += 1
            self.dirty = True

    def failed(self, exc: BaseException) -> None:
        self.traceback = _tail("".join(traceback.format_exception(exc)), MAX_TRACEBACK_BYTES)

    def ended(self, outcome: str | None, *, keep: bool) -> None:
        """Say how the job ended and whether its lines are kept (the engine decides)."""
        self.outcome, self.keep = outcome, keep

    def snapshot(self) -> Snapshot:
        with self.guard:
            return Snapshot("\n".join(self.lines), self.dropped, self.traceback)

    def flush(self) -> None:
        """Store what is new while the stage runs (the flusher thread's round). Never waited
        for by the stage: a flush that lands after the job's end writes nothing over it (the
        row is finished, or this flush takes its own row away again)."""
        with self.guard:
            if self.closed or not self.dirty:
                return
            self.dirty, first = False, not self.stored
            taken = Snapshot("\n".join(self.lines), self.dropped, self.traceback)
        stored = False
        try:
            self._store_unfinished(taken, first=first)
            stored = True
        except Exception as exc:  # the database away: the next round tries again
            log.warning("flushing the log of run-%s %s failed: %s", self.run_id, self.stage, exc)
            connection.close()
        with self.guard:
            self.stored = self.stored or stored
            self.dirty = self.dirty or not stored
            orphaned = stored and self.closed and not self.keep
        if orphaned:
            self._drop()

    def close_and_store(self) -> None:
        """The end of the job: no flush starts after this; the row finished, or taken away. A
        job's outcome never depends on its log: a failure here is a warning."""
        with self.guard:
            self.closed = True
            stored = self.stored
        try:
            if self.keep:
                self._store_finished(self.snapshot(), outcome=self.outcome or RAISED)
            elif stored:
                self._drop()
        except Exception as exc:
            log.warning("storing the log of run-%s %s failed: %s", self.run_id, self.stage, exc)

    def _row(self, taken: Snapshot, outcome: str) -> StageLog:
        return StageLog(
            run_id=self.run_id,
            stage=self.stage,
            token=self.token,
            attempt=self.attempt,
            worker=self.worker,
            outcome=outcome,
            lines=taken.lines,
            dropped=taken.dropped,
            traceback=taken.traceback,
            started_at=self.started_at,
            updated_at=timezone.now(),
        )

    def _store_finished(self, taken: Snapshot, *, outcome: str) -> None:
        """One statement: the row inserted, or brought up to date (the run's token names it)."""
        StageLog.objects.bulk_create(
            [self._row(taken, outcome)],
            update_conflicts=True,
            unique_fields=["run", "token"],
            update_fields=["outcome", "lines", "dropped", "traceback", "updated_at"],
        )

    def _store_unfinished(self, taken: Snapshot, *, first: bool) -> None:
        """One statement, which never touches a finished row: the first flush inserts unless
        the end's row is there already, later ones update the row while it is unfinished."""
        if first:
            StageLog.objects.bulk_create([self._row(taken, "")], ignore_conflicts=True)
            return
        StageLog.objects.filter(run_id=self.run_id, token=self.token, outcome="").update(
            lines=taken.lines,
            dropped=taken.dropped,
            traceback=taken.traceback,
            updated_at=timezone.now(),
        )

    def _drop(self) -> None:
        StageLog.objects.filter(run_id=self.run_id, token=self.token).delete()


@contextlib.contextmanager
def capturing(run_id: int, stage: str, token: int, attempt: int, worker: str) -> Iterator[Capture]:
    """Collect the job's lines while the block runs, then store or drop them. An exception
    that escapes the block is kept, with its traceback."""
    capture = Capture(run_id, stage, token, attempt, worker)
    root = logging.getLogger()
    root.addHandler(capture)
    flusher.watch(capture)
    try:
        yield capture
    except BaseException as exc:
        if not capture.traceback:
            capture.failed(exc)
        capture.ended(RAISED, keep=True)
        raise
    finally:
        flusher.unwatch(capture)
        root.removeHandler(capture)
        capture.close_and_store()


class Flusher:
    """One thread per process that flushes the running stages' captures every FLUSH_SECONDS.
    It connects for a round and closes after it, like the heartbeats (runs/ledger/leases.py)."""

    def __init__(self) -> None:
        self._captures: set[Capture] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, capture: Capture) -> None:
        with self._lock:
            self._captures.add(capture)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, daemon=True, name="resumer-stage-log"
                )
                self._thread.start()

    def unwatch(self, capture: Capture) -> None:
        with self._lock:
            self._captures.discard(capture)

    def round(self) -> None:
        with self._lock:
            captures = list(self._captures)
        for capture in captures:
            capture.flush()

    def _run(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            try:
                self.round()
            finally:
                connection.close()


flusher = Flusher()

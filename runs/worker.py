"""The RQ worker class Resumer runs: RQ's SimpleWorker plus the lease sweeper.

SimpleWorker executes jobs in the worker process itself, so a fault-injected crash (SIGKILL)
kills the worker the way an OOM kill would, and Django's connections are never shared across
a fork. The sweeper thread is what turns a dead worker's run into *interrupted*: it reads the
database's leases, so detection does not wait on RQ's own abandoned-job cleanup.

    manage.py rqworker default --worker-class runs.worker.ResumerWorker
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

from django.conf import settings
from django.db import connection
from rq.worker import SimpleWorker

from runs import sweeper

log = logging.getLogger("runs.worker")


class SweeperThread(threading.Thread):
    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True, name="resumer-sweeper")
        self.interval = interval
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                sweeper.sweep()
            except Exception as exc:  # database or Redis away: try again next round
                log.warning("sweep failed: %s", exc)
                connection.close()
        connection.close()


class ResumerWorker(SimpleWorker):
    def work(self, *args, **kwargs):  # type: ignore[override]
        thread = SweeperThread(float(settings.RESUMER_SWEEP_INTERVAL))
        thread.start()
        try:
            return super().work(*args, **kwargs)
        finally:
            thread.stopping.set()


def command(*, queue: str | None = None, burst: bool = False) -> list[str]:
    """The command line that runs one Resumer worker (`manage.py work`, the tests and the
    fault matrix all start workers with it)."""
    cmd = [
        sys.executable,
        str(Path(settings.BASE_DIR) / "manage.py"),
        "rqworker",
        queue or settings.RESUMER_QUEUE,
        "--worker-class",
        f"{ResumerWorker.__module__}.{ResumerWorker.__qualname__}",
    ]
    return [*cmd, "--burst"] if burst else cmd

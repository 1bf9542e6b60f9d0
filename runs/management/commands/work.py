"""Run one Resumer worker and start it again when it dies, as systemd's Restart=on-failure
would in production. `make run` uses it, so the demo's injected crashes (the worker kills
itself) leave the machine with a worker, as a real deployment would."""

from __future__ import annotations

import signal
import subprocess
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from runs import worker


class Command(BaseCommand):
    help = "Run `rqworker` with Resumer's worker class and restart it when it dies."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue", default=settings.RESUMER_QUEUE)

    def handle(self, *args, **opts) -> None:
        cmd = worker.command(queue=opts["queue"])
        stopping = False
        child: subprocess.Popen | None = None

        def stop(signum, frame) -> None:
            nonlocal stopping
            stopping = True
            if child is not None and child.poll() is None:
                child.send_signal(signal.SIGTERM)  # RQ's warm shutdown: finish the job

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while not stopping:
            child = subprocess.Popen(cmd)
            code = child.wait()
            if stopping:
                break
            self.stderr.write(f"worker exited with {code}; starting a new one in 1 s")
            time.sleep(1)

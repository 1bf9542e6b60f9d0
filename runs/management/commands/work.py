"""Run one Resumer worker and start it again when it dies, as systemd's Restart=on-failure
would in production. `make run` uses it, so the demo's injected crashes (the worker kills
itself) leave the machine with a worker, as a real deployment would."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from runs.execution import worker
from runs.execution.supervisor import supervise


class Command(BaseCommand):
    help = "Run `rqworker` with Resumer's worker class and restart it when it dies."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue", default=settings.RESUMER_QUEUE)

    def handle(self, *args, **opts) -> None:
        supervise(worker.command(queue=opts["queue"]), name="worker", say=self.stderr.write)

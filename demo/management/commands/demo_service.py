"""Run the demo service (`python -m demo_service`: the renderer, asset store, platform and card
processor the demo pipeline calls over HTTP) and start it again when it dies, beside the
worker, as `make run` does. It listens where settings.DEMO_SERVICE_URL points, so the web
server, the workers and seed_demo reach the same one.

    manage.py demo_service                 # supervise it (until SIGTERM / Ctrl-C)
    manage.py demo_service --wait 30       # only wait until it answers (exit 1 if it does not)
"""

from __future__ import annotations

import sys
import time
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from demo_service.process import ServiceClient
from runs.execution.supervisor import supervise


class Command(BaseCommand):
    help = "Run the demo HTTP service at DEMO_SERVICE_URL and restart it when it dies."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--wait",
            type=float,
            metavar="SECONDS",
            help="do not start it: wait until the service answers, at most this long",
        )

    def handle(self, *args, **opts) -> None:
        url = settings.DEMO_SERVICE_URL
        if opts["wait"] is not None:
            self._wait(url, opts["wait"])
            return
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
            raise CommandError(
                f"DEMO_SERVICE_URL={url!r}: to run the service here it must look like "
                "http://host:port"
            )
        cmd = [sys.executable, "-m", "demo_service", "--host", parts.hostname]
        cmd += ["--port", str(parts.port or 80)]
        self.stdout.write(f"demo service at {url}", ending="\n")
        self.stdout.flush()
        # `python -m demo_service` imports the package from the project folder.
        supervise(cmd, name="demo service", say=self.stderr.write, cwd=str(settings.BASE_DIR))

    def _wait(self, url: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        service = ServiceClient(url)
        while not service.answers():
            if time.monotonic() > deadline:
                raise CommandError(f"the demo service did not answer at {url} within {seconds:g} s")
            time.sleep(0.2)
        self.stdout.write(f"demo service answers at {url}")

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.checks import COMMAND_CHECKS
from runs.ledger.verify import DigestError, make_digest


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Write every run's head (last seq and hash), signed under RESUMER_CHAIN_KEY, to a file "
        "the database's writer cannot change; `verify_chain --against FILE` then tells a "
        "rollback of the database from its real history. Run it periodically (cron, a timer)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, help="where to write the digest (JSON)")

    def handle(self, *args, **opts) -> None:
        try:
            digest = make_digest()
        except DigestError as exc:
            raise CommandError(str(exc)) from exc
        out = Path(opts["out"])
        # Written beside the target and renamed over it: a reader never sees half a digest.
        try:
            fd, tmp = tempfile.mkstemp(dir=out.parent or ".", prefix=f".{out.name}.")
            with os.fdopen(fd, "w") as handle:
                json.dump(digest, handle, indent=1, sort_keys=True)
            os.replace(tmp, out)
        except OSError as exc:
            raise CommandError(f"cannot write {out}: {exc}") from exc
        self.stdout.write(f"{len(digest['heads'])} run heads written to {out}")

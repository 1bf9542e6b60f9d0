"""`manage.py start_run` plus the demo's fault injection (demo/faults.py):

manage.py start_run_with_faults content --crash-at visual/upload-cover/before
manage.py start_run_with_faults content --timeout-at publish/promote-charge/after
manage.py start_run_with_faults content --delay 2
manage.py start_run_with_faults content --network publish/publish=drop
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from demo import faults
from runs.management.commands import start_run
from runs.models import Run


class Command(start_run.Command):
    help = "Start a run like start_run, with injected faults: a crash, a lost answer, a delay."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--crash-at",
            metavar="STAGE/CALL/before|after",
            help="the worker dies hard (SIGKILL) at this call, on the run's first attempt",
        )
        parser.add_argument(
            "--timeout-at",
            metavar="STAGE/CALL/after",
            help="this call's answer never arrives (its outcome is unknown)",
        )
        parser.add_argument("--delay", type=float, help="seconds before each call")
        parser.add_argument(
            "--network",
            action="append",
            default=[],
            metavar="STAGE/CALL=drop|late|5xx|down",
            help="the demo service fails this call's request (repeatable)",
        )

    def start(
        self, pipeline: str, inputs: dict[str, str], *, enqueue: bool, opts: dict[str, Any]
    ) -> Run:
        spec: dict[str, Any] = {}
        if opts["crash_at"]:
            spec["crash"] = opts["crash_at"]
        if opts["timeout_at"]:
            spec["timeout"] = opts["timeout_at"]
        if opts["delay"] is not None:
            spec["delay"] = opts["delay"]
        if opts["network"]:
            spec["network"] = dict(item.partition("=")[::2] for item in opts["network"])
        return faults.start_run(pipeline, inputs, actor="cli", faults=spec, enqueue=enqueue)

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.checks import COMMAND_CHECKS
from runs.execution import engine
from runs.models import Run
from runs.pipeline import InvalidInput, UnknownPipeline


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = "Start a run of a registered pipeline and queue its first stage."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("pipeline")
        parser.add_argument(
            "--input",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="pin an input version, e.g. --input facts=v3 (repeatable)",
        )
        parser.add_argument(
            "--no-enqueue", action="store_true", help="create the run without queueing it"
        )

    def handle(self, *args, **opts) -> None:
        inputs = {}
        for item in opts["input"]:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise CommandError(f"--input {item!r} must look like name=value")
            inputs[name.strip()] = value.strip()
        try:
            run = self.start(opts["pipeline"], inputs, enqueue=not opts["no_enqueue"], opts=opts)
        except (UnknownPipeline, InvalidInput) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{run.public_id} {run.status} inputs={run.inputs}")

    def start(
        self, pipeline: str, inputs: dict[str, str], *, enqueue: bool, opts: dict[str, Any]
    ) -> Run:
        """Create the run (a subclass may start it differently, e.g. with faults)."""
        return engine.start_run(pipeline, inputs, actor="cli", enqueue=enqueue)

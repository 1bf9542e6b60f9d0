from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs import engine
from runs.pipeline import InvalidInput, UnknownPipeline


class Command(BaseCommand):
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
            "--crash-at",
            metavar="STAGE/CALL/before|after",
            help="fault injection: the worker dies hard at this call",
        )
        parser.add_argument(
            "--timeout-at",
            metavar="STAGE/CALL/after",
            help="fault injection: this call's answer never arrives",
        )
        parser.add_argument("--delay", type=float, help="seconds each call takes (demo)")
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
        options = {}
        if opts["crash_at"]:
            options["crash"] = opts["crash_at"]
        if opts["timeout_at"]:
            options["timeout"] = opts["timeout_at"]
        if opts["delay"] is not None:
            options["delay"] = opts["delay"]
        try:
            run = engine.start_run(
                opts["pipeline"],
                inputs,
                actor="cli",
                options=options,
                enqueue=not opts["no_enqueue"],
            )
        except (UnknownPipeline, InvalidInput) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{run.public_id} {run.status} inputs={run.inputs}")

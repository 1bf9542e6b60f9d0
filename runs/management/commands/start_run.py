from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
    DjangoHelpFormatter,
)

from runs.checks import COMMAND_CHECKS
from runs.execution import engine
from runs.models import Run
from runs.pipeline import Input, InvalidInput, UnknownPipeline, registry

# What the help says of an input read from its source as the run starts (a versioned one).
AT_START = "<its current version>"
REQUIRED = "<required>"


class InputsHelpFormatter(DjangoHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Django's order of the options, and the epilog's table of inputs as it is written."""


def default_of(spec: Input, known: dict[str, Any]) -> str | None:
    """What a run started without --input NAME pins, as far as can be said without asking a
    source: an unversioned input's value (its `current()`, given the values known before
    it; typed JSON as JSON); None for a versioned one, read from its source as the run
    starts (Pipeline.resolve_inputs), for a required one, or for one whose value only the
    start can tell."""
    if spec.current is None or (spec.versioned and spec.schema is None):
        return None
    try:
        return json_text(spec.pin(spec.current(known), known, given=False))
    except Exception:  # it needs what only the start knows; the start says what went wrong
        return None


def json_text(value: Any) -> str:
    """A pinned value as a person types it: text as it is, typed JSON as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def placeholder(spec: Input) -> str:
    """What the help says of an input it cannot show a value of."""
    said = REQUIRED if spec.current is None else AT_START
    return f"{said[:-1]}, JSON: {spec.schema.__name__}>" if spec.schema is not None else said


def inputs_help() -> str:
    """Each registered pipeline's inputs, NAME=DEFAULT, with what they are for."""
    try:
        pipelines = [registry.get(name) for name in registry.names()]
    except Exception as exc:  # a module may fail with anything; `manage.py check` says why
        return f"The pipelines do not load ({type(exc).__name__}); manage.py check says why."
    lines = ["inputs (--input NAME=VALUE; an input not given is pinned as the run starts):"]
    for pipeline in pipelines:
        lines += ["", f"{pipeline.name}" + ("" if pipeline.inputs else ": no inputs")]
        known: dict[str, Any] = {}
        for spec in pipeline.inputs:
            value = default_of(spec, known)
            if value is not None:
                known[spec.name] = value
            pair = f"  {spec.name}={placeholder(spec) if value is None else value}"
            lines += textwrap.wrap(
                spec.help,
                width=79,
                initial_indent=f"{pair:<31} ",
                subsequent_indent=" " * 32,
            ) or [pair]
    return "\n".join(lines)


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = "Start a run of a registered pipeline and queue its first stage."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.epilog = inputs_help()
        parser.formatter_class = InputsHelpFormatter
        parser.add_argument("pipeline", help="a registered pipeline's name (listed below)")
        parser.add_argument(
            "--input",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="pin an input, e.g. --input facts=v3, or JSON for a typed one: "
            '--input \'email={"to": "a@example.com"}\' (repeatable)',
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
        pinned = json.dumps(run.inputs, ensure_ascii=False)
        self.stdout.write(f"{run.public_id} {run.status} inputs={pinned}")

    def start(
        self, pipeline: str, inputs: dict[str, Any], *, enqueue: bool, opts: dict[str, Any]
    ) -> Run:
        """Create the run (a subclass may start it differently, e.g. with faults)."""
        return engine.start_run(pipeline, inputs, actor="cli", enqueue=enqueue)

"""`manage.py start_run` plus the demo's fault injection (demo/faults.py), for any registered
pipeline whose workers run the fault hooks (RESUMER_FAULTS=1; on with the demo pipeline):

manage.py start_run_with_faults content --crash-at visual/upload-cover/before
manage.py start_run_with_faults content --crash-at publish/editorial/after-answer
manage.py start_run_with_faults content --timeout-at publish/promote-charge/after
manage.py start_run_with_faults content --delay 2
manage.py start_run_with_faults content --network publish/publish=drop
"""

from __future__ import annotations

import textwrap
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.utils.module_loading import import_string

from demo import faults
from runs.management.commands import start_run
from runs.models import Run
from runs.pipeline import Pipeline, registry

POINTS = """\
crash points (--crash-at; the worker is SIGKILLed there on the run's first attempt):
  STAGE/CALL/before          the call's intent is recorded, the call not made
  STAGE/CALL/after           the call was made, its result not recorded
  STAGE/GATE/before-ask      before the gate opens (a question, or a call's confirmation,
                             named by its call)
  STAGE/GATE/after-answer    the stage runs again with the gate's answer, before it acts
--timeout-at takes STAGE/CALL/after: the call is made, its answer never arrives.
A stage that declares its calls (Stage.calls) and gates (Stage.asks) has its points checked;
one that declares none takes the point as given."""


def _points(pipeline: Pipeline) -> list[str]:
    """The pipeline's declared points, one line per stage."""
    lines = []
    for stage in pipeline.stages:
        said = [f"{c.call_id}/before|after" for c in stage.calls]
        gates = [*stage.asks] + [
            c.call_id for c in stage.calls if pipeline.tool(c.tool).confirmation is not None
        ]
        said += [f"{gate}/before-ask|after-answer" for gate in gates]
        lines += textwrap.wrap(
            ", ".join(said) or "no declared calls",
            width=79,
            initial_indent=f"  {stage.name}: ",
            subsequent_indent="    ",
            break_on_hyphens=False,
        )
    return lines


def points_help() -> str:
    lines = [POINTS]
    try:
        pipelines = [registry.get(name) for name in registry.names()]
    except Exception as exc:  # a module may fail with anything; `manage.py check` says why
        return f"{POINTS}\n\nThe pipelines do not load ({type(exc).__name__})."
    for pipeline in pipelines:
        lines += ["", f"{pipeline.name} (STAGE: its points):", *_points(pipeline)]
    return "\n".join(lines)


def check_hooks() -> None:
    """The faults are acted on by the hooks every worker installs: refuse to record faults
    no worker of this configuration would act on."""
    path = settings.RESUMER_CALL_HOOKS
    hooks = import_string(path) if path else None
    if not (isinstance(hooks, type) and issubclass(hooks, faults.FaultHooks)):
        raise CommandError(
            "fault injection needs the fault hooks on every worker: set RESUMER_FAULTS=1 "
            "(or RESUMER_CALL_HOOKS=demo.faults.FaultHooks) in the environment of the web "
            f"server, this command and every worker (RESUMER_CALL_HOOKS is {path!r} here)"
        )


class Command(start_run.Command):
    help = (
        "Start a run like start_run, with injected faults: a crash, a lost answer, a delay. "
        "Works for any registered pipeline whose workers run with RESUMER_FAULTS=1 (on with "
        "the demo pipeline)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.epilog = f"{points_help()}\n\n{parser.epilog}"
        parser.add_argument(
            "--crash-at",
            metavar="STAGE/CALL/before|after or STAGE/GATE/before-ask|after-answer",
            help="the worker dies hard (SIGKILL) there, on the run's first attempt",
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
            help="the demo service fails this call's request (repeatable; the demo "
            "service's tools only)",
        )

    def start(
        self, pipeline: str, inputs: dict[str, Any], *, enqueue: bool, opts: dict[str, Any]
    ) -> Run:
        check_hooks()
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

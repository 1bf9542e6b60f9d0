from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.planner import compute_plan
from runs.report import plan_as_text
from runs.resume import ResumeRefused, load_run


class Command(BaseCommand):
    help = "Print the reconcile plan of a run (changes nothing)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="run id, e.g. run-9269")
        parser.add_argument("--json", action="store_true", help="machine-readable output")

    def handle(self, *args, **opts) -> None:
        try:
            run = load_run(opts["run"])
        except ResumeRefused as exc:
            raise CommandError(str(exc)) from exc
        plan = compute_plan(run)
        if opts["json"]:
            self.stdout.write(json.dumps(plan.to_dict(), indent=2, default=str))
        else:
            self.stdout.write(plan_as_text(plan))

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs import quantities
from runs.checks import COMMAND_CHECKS
from runs.planning import triage
from runs.planning.acts import plan_acts
from runs.planning.planner import compute_plan
from runs.planning.report import plan_as_text
from runs.planning.resume import ResumeRefused, load_run
from runs.reads import inbox


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Print the reconcile plan of a run, or (--groups) the runs that need a human grouped "
        "by the shape of their stored plans. Changes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", nargs="?", help="run id, e.g. run-9269")
        parser.add_argument(
            "--groups",
            action="store_true",
            help="list the groups of runs that need a human, by plan shape (from stored plans)",
        )
        parser.add_argument("--json", action="store_true", help="machine-readable output")

    def handle(self, *args, **opts) -> None:
        if opts["run"] and opts["groups"]:
            raise CommandError("name a run (e.g. run-9269) or pass --groups, not both")
        if not opts["run"] and not opts["groups"]:
            raise CommandError("name a run (e.g. run-9269), or pass --groups")
        if opts["groups"]:
            self._groups(opts["json"])
            return
        try:
            run = load_run(opts["run"])
        except ResumeRefused as exc:
            raise CommandError(str(exc)) from exc
        plan = compute_plan(run)
        if opts["json"]:
            data = {**plan.to_dict(), "acts": plan_acts(plan).to_dict()}
            self.stdout.write(json.dumps(data, indent=2, default=str))
        else:
            why = inbox.stop_facts(run, inbox.stopping_events([run]).get(run.pk, {})).why
            self.stdout.write(plan_as_text(plan, why))

    def _groups(self, as_json: bool) -> None:
        found = triage.groups()
        if as_json:
            data = {
                "groups": [
                    {
                        "fingerprint": g.fingerprint,
                        "runs": g.count,
                        "sentence": g.sentence,
                        "approvable": g.approvable,
                        "resume_money": quantities.amount(g.resume_money),
                        "acts": g.acts.to_dict() if g.acts is not None else None,
                        "shape": g.shape,
                    }
                    for g in found.groups
                ],
                "unplanned": found.unplanned,
            }
            self.stdout.write(json.dumps(data, indent=2))
            return
        if not found.groups and not found.unplanned:
            self.stdout.write("No run needs a human.")
        for g in found.groups:
            self.stdout.write(f"group {g.fingerprint}")
            self.stdout.write(f"  {g.sentence}")
            if g.approvable:
                self.stdout.write(
                    f"  approve: manage.py resume --group {g.fingerprint} --strict"
                    + (" (or --upgrade)" if g.upgrade_available else "")
                )
        if found.unplanned:
            self.stdout.write(
                f"{found.unplanned} stopped run(s) without a current stored plan "
                "(`manage.py plan RUN` computes one)."
            )

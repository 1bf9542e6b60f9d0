from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.resume import STRICT, UPGRADE, AlreadyApproved, ResumeRefused, approve, load_run


class Command(BaseCommand):
    help = "Approve a run's plan: --strict resume, or --upgrade inputs into a new branch."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="run id, e.g. run-9269")
        mode = parser.add_mutually_exclusive_group(required=True)
        mode.add_argument("--strict", action="store_const", const=STRICT, dest="action")
        mode.add_argument("--upgrade", action="store_const", const=UPGRADE, dest="action")
        parser.add_argument(
            "--fingerprint", required=True, help="the fingerprint printed by `manage.py plan`"
        )
        parser.add_argument("--actor", default="cli", help="who approves (recorded)")

    def handle(self, *args, **opts) -> None:
        try:
            run = load_run(opts["run"])
            approval = approve(
                run, opts["action"], opts["fingerprint"], actor=f"user:{opts['actor']}"
            )
        except AlreadyApproved as exc:
            # The same decision again (a re-run script): not an error, as in the dashboard.
            self.stdout.write(f"{opts['run']}: {exc}")
            return
        except ResumeRefused as exc:
            hint = f" Fresh fingerprint: {exc.plan.fingerprint}" if exc.plan else ""
            raise CommandError(f"{exc}.{hint}") from exc
        if approval.branch:
            self.stdout.write(f"{run.public_id} superseded by branch {approval.branch.public_id}")
        else:
            self.stdout.write(f"{run.public_id} resuming at {approval.run.current_stage or '-'}")

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs import ids
from runs.checks import COMMAND_CHECKS
from runs.models import ApprovalMode
from runs.planning import triage
from runs.planning.resume import AlreadyApproved, ResumeRefused, StalePlan, approve, load_run


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Approve a run's plan: --strict resume, or --upgrade inputs into a new branch. With "
        "--group, approve every run of a group of plans with the same shape (`plan --groups`)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", nargs="?", help="run id, e.g. run-9269")
        parser.add_argument(
            "--group",
            help="a group fingerprint printed by `manage.py plan --groups`: approve its runs",
        )
        parser.add_argument(
            "--runs",
            help="with --group: only these runs of it, comma-separated (e.g. run-3,run-7)",
        )
        mode = parser.add_mutually_exclusive_group(required=True)
        mode.add_argument(
            "--strict", action="store_const", const=ApprovalMode.STRICT, dest="action"
        )
        mode.add_argument(
            "--upgrade", action="store_const", const=ApprovalMode.UPGRADE, dest="action"
        )
        parser.add_argument(
            "--fingerprint",
            help="the fingerprint printed by `manage.py plan` (with --group: the group's, "
            "if given it must be the same)",
        )
        parser.add_argument("--actor", default="cli", help="who approves (recorded)")

    def handle(self, *args, **opts) -> None:
        if opts["run"] and opts["group"]:
            raise CommandError("name a run or pass --group, not both")
        if not opts["run"] and not opts["group"]:
            said = "--runs selects runs of a --group" if opts["runs"] else "name a run"
            raise CommandError(f"{said}, or pass --group with a group's fingerprint")
        if opts["group"]:
            self._group(opts)
            return
        if opts["runs"]:
            raise CommandError("--runs selects runs of a --group")
        if not opts["fingerprint"]:
            raise CommandError("--fingerprint is required: the one `manage.py plan` printed")
        try:
            run = load_run(opts["run"])
            approval = approve(
                run, opts["action"], opts["fingerprint"], actor=ids.user_actor(opts["actor"])
            )
        except AlreadyApproved as exc:
            # The same decision again (a re-run script): not an error, as in the dashboard.
            self.stdout.write(f"{opts['run']}: {exc}")
            return
        except ResumeRefused as exc:
            # Only a plan that changed is approved with its fresh fingerprint: a refusal for
            # another reason (blocked, no upgrade) would be refused the same way again.
            stale = isinstance(exc, StalePlan) and exc.plan is not None
            hint = f" Fresh fingerprint: {exc.plan.fingerprint}" if stale else ""
            # A refusal that says why in sentences ends with its own full stop.
            said = str(exc) if str(exc).endswith(".") else f"{exc}."
            raise CommandError(f"{said}{hint}") from exc
        if approval.branch:
            self.stdout.write(f"{run.public_id} superseded by branch {approval.branch.public_id}")
        else:
            self.stdout.write(f"{run.public_id} resuming at {approval.run.current_stage or '-'}")

    def _group(self, opts) -> None:
        group = opts["group"].strip()
        if opts["fingerprint"] and opts["fingerprint"].strip() != group:
            raise CommandError("--fingerprint is not the group's: read `plan --groups` again")
        try:
            run_ids = (
                triage.parse_run_ids([v for v in opts["runs"].split(",") if v.strip()])
                if opts["runs"] is not None
                else None
            )
            batch = triage.approve_group(
                group, run_ids, action=opts["action"], actor=ids.user_actor(opts["actor"])
            )
        except triage.GroupRefused as exc:
            raise CommandError(f"{exc}; nothing was approved") from exc
        for approval in batch.approved:
            resumed = approval.resumed
            self.stdout.write(
                f"{approval.run.public_id} "
                + (
                    f"superseded by branch {resumed.public_id}"
                    if approval.branch
                    else f"resuming at {resumed.current_stage or '-'}"
                )
            )
        for skipped in batch.skipped:
            fresh = (
                f" Fresh fingerprint: {skipped.plan.fingerprint} (group {skipped.group})"
                if skipped.plan
                else ""
            )
            self.stdout.write(f"{skipped.public_id} skipped: {skipped.reason}.{fresh}")
        summary = f"batch {batch.id}: approved {len(batch.approved)}, skipped {len(batch.skipped)}"
        if not batch.approved:
            raise CommandError(f"{summary}; nothing was approved")
        self.stdout.write(summary)

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.checks import COMMAND_CHECKS
from runs.ledger.verify import ANCHORS_NOT_CHECKED, DigestError, load_digest, verify_chain
from runs.models import Run
from runs.planning.resume import ResumeRefused, load_run


class Command(BaseCommand):
    requires_system_checks = COMMAND_CHECKS
    help = (
        "Walk runs' event hash chains, check their checkpoint and effect rows against their "
        "events, their head anchors (with RESUMER_CHAIN_KEY) and, with --against, a digest of "
        "heads; exits non-zero if any history was altered."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("runs", nargs="*", help="run ids (default: all runs)")
        parser.add_argument(
            "--against",
            metavar="DIGEST",
            help="a digest of heads (manage.py chain_digest) kept outside the database's "
            "reach: every head it saw must still be in the log (no rollback)",
        )

    def handle(self, *args, **opts) -> None:
        try:
            runs = [load_run(r) for r in opts["runs"]] or Run.objects.order_by("pk").iterator()
        except ResumeRefused as exc:
            raise CommandError(str(exc)) from exc
        try:
            against = load_digest(opts["against"]) if opts["against"] else None
        except DigestError as exc:
            raise CommandError(str(exc)) from exc
        if against is not None:
            missing = set(against) - set(Run.objects.values_list("pk", flat=True))
            if missing:
                raise CommandError(
                    f"{len(missing)} run(s) the digest saw are gone: "
                    + ", ".join(f"run-{pk}" for pk in sorted(missing)[:10])
                )
        if not settings.RESUMER_CHAIN_KEY:
            # Said once, first: without the key a history rewritten end to end still passes.
            self.stdout.write(ANCHORS_NOT_CHECKED)
        broken = 0
        for run in runs:
            report = verify_chain(run.pk, against=against)
            if report.ok:
                self.stdout.write(f"{run.public_id}: ok ({report.checked} events)")
            else:
                broken += 1
                where = f" at seq {report.first_bad_seq}" if report.first_bad_seq else ""
                self.stdout.write(
                    f"{run.public_id}: BROKEN{where}: " + "; ".join(report.problems[:3])
                )
        if broken:
            raise CommandError(f"{broken} run(s) have an altered history")

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs import ids
from runs.events import read
from runs.planning.close_out import CloseRefused, close_out
from runs.planning.resume import ResumeRefused, load_run


class Command(BaseCommand):
    help = (
        "Close a stopped run out (interrupted, failed, needing approval or waiting at a gate), "
        "with a reason recorded in its chain: it is never resumed and leaves the inbox. "
        "Closing settles nothing outside: unsettled effects stay as they are."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="run id, e.g. run-9269")
        parser.add_argument("--reason", required=True, help="why the run is closed out")
        parser.add_argument("--actor", default="cli", help="who closes it (recorded)")

    def handle(self, *args, **opts) -> None:
        try:
            run = load_run(opts["run"])
            event = close_out(run.pk, opts["reason"], actor=ids.user_actor(opts["actor"]))
        except (ResumeRefused, CloseRefused) as exc:
            raise CommandError(f"{exc}; nothing was closed") from exc
        unsettled = read(event).unsettled
        self.stdout.write(f"{run.public_id} closed out (event #{event.seq})")
        for effect in unsettled:
            self.stdout.write(
                f"  still unsettled: {effect['tool']} ({effect['call']}) is {effect['status']}; "
                "closing settles nothing outside"
            )

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs import ids
from runs.gates.decision import earlier_attempt
from runs.gates.reopen import AskAgainRefused, ask_again
from runs.planning.resume import ResumeRefused, load_run


class Command(BaseCommand):
    help = (
        "Ask a gate again (a confirmation whose call the target refused, or a question that "
        "sent its stage back): it reopens, and the run waits for the new answer."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="run id, e.g. run-9269")
        parser.add_argument(
            "--gate", type=int, help="the gate's id, when the run has more than one to ask"
        )
        parser.add_argument("--actor", default="cli", help="who asks again (recorded)")

    def handle(self, *args, **opts) -> None:
        try:
            run = load_run(opts["run"])
            gate = ask_again(run.pk, actor=ids.user_actor(opts["actor"]), gate_pk=opts["gate"])
        except (ResumeRefused, AskAgainRefused) as exc:
            raise CommandError(f"{exc}; nothing was asked") from exc
        self.stdout.write(
            f"{run.public_id} waits at {gate.stage}/{gate.gate_id} (gate {gate.pk}), asked "
            f"again after {earlier_attempt(gate)}"
        )

"""An operator asks a supervisor to settle an effect, from the effect's page.

A plan blocked on an effect waits for a supervisor (only they correct the ledger); an operator
who finds it used to have no way to tell one. Asking records who asked (SupervisorAsk) and puts
the run in the open notification, as a run that stops does (runs/notify.py `join`): the same
batched, signed webhook and email go to the same targets after the same window, and the
message names who asked about which effect. With no notification target configured nobody is
told: the ask is still recorded and shown on the effect's page, and the page says so. Changes
nothing of the run: no event, no lease, no plan computed again."""

from __future__ import annotations

from django.db import transaction

from runs import notify
from runs.models import Effect, Run, SupervisorAsk

# Why the run is in the notification (NotificationRun.reason): "asked for a supervisor".
REASON = "asked_for_a_supervisor"


class AskRefused(Exception):
    """Nothing to ask a supervisor about: nothing was recorded or sent."""


def ask_supervisor(effect_pk: int, *, actor: str) -> SupervisorAsk:
    """Record that `actor` asked a supervisor to settle the effect, and notify them. Refused
    (AskRefused) while the run is not stopped, or when the ledger holds the effect settled."""
    with transaction.atomic():
        effect = Effect.objects.select_related("run").filter(pk=effect_pk).first()
        if effect is None:
            raise AskRefused(f"there is no effect {effect_pk}")
        run: Run = effect.run
        if not run.is_resumable:
            raise AskRefused(
                f"{run.public_id} {run.status_said}: its effects are "
                "settled only while it is stopped"
            )
        if effect.status in Effect.SETTLED:
            raise AskRefused(
                f"the ledger holds {effect.tool} ({effect.stage}/{effect.call_id}) "
                f"{effect.get_status_display().lower()}: there is nothing to settle"
            )
        notification = notify.join(run.pk, run.last_seq, REASON) if notify.channels() else None
        return SupervisorAsk.objects.create(
            effect=effect, asked_by=actor, notification_id=notification
        )

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks
from django.db.backends.signals import connection_created


def _register_sqlite_guard(sender, connection, **kwargs) -> None:
    # The SQLite triggers on events and checkpoints call resumer_maintenance(); only this
    # application's connections define it, so a raw sqlite3 client fails closed.
    if connection.vendor != "sqlite":
        return
    connection.connection.create_function(
        "resumer_maintenance",
        0,
        lambda: int(bool(getattr(connection, "_resumer_maintenance", False))),
        deterministic=False,
    )
    # The effect rows' trigger (migration 0014) lets the append path's own writes through.
    connection.connection.create_function(
        "resumer_ledger",
        0,
        lambda: int(bool(getattr(connection, "_resumer_ledger", False))),
        deterministic=False,
    )


class RunsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "runs"
    verbose_name = "Resumer runs"

    def ready(self) -> None:
        from runs import notify, signals
        from runs.checks import (
            chain_key_check,
            check_call_hooks,
            check_notifications,
            check_numbers,
            check_pipelines,
            check_secret_key,
            check_sqlite_synchronous,
        )
        from runs.planning import stored_plans

        connection_created.connect(_register_sqlite_guard, dispatch_uid="resumer_sqlite_guard")
        checks.register(check_pipelines, "resumer")
        checks.register(check_call_hooks, "resumer")
        checks.register(chain_key_check, checks.Tags.security)
        checks.register(check_secret_key, checks.Tags.security)
        checks.register(check_notifications, "resumer")
        checks.register(check_sqlite_synchronous, "resumer")
        checks.register(check_numbers, "resumer")
        # The plan first: a notification that links to the run should find it being computed.
        signals.run_stopped.connect(stored_plans.on_run_stopped, dispatch_uid="resumer_plan")
        signals.run_stopped.connect(notify.on_run_stopped, dispatch_uid="resumer_notify")
        signals.gate_escalating.connect(
            notify.on_gate_escalating, dispatch_uid="resumer_notify_gate"
        )

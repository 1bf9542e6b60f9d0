"""The hot tables' vocabulary checks (a run's status, an event's type, an effect's status and
policy) as one array constant on PostgreSQL (models.OneOf): PostgreSQL checks every CHECK of a
row it writes, and read back an IN list's constants and folded them into an array again in
each statement, a tenth of its work on a tool call (issue 49). The same values, the same
constraints by name; on SQLite the SQL stays IN and nothing is rebuilt (the models' state
changes alone, so the tables' triggers stay)."""

from django.db import migrations, models

# (model, constraint, column)
CHECKS = (
    ("run", "run_status_valid", "status"),
    ("event", "event_type_valid", "type"),
    ("effect", "effect_status_valid", "status"),
    ("effect", "effect_policy_valid", "policy"),
)


def _replace(apps, schema_editor, lookup: str) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for model_name, name, column in CHECKS:
        model = apps.get_model("runs", model_name)
        (state,) = [c for c in model._meta.constraints if c.name == name]
        values = dict(state.condition.children)[f"{column}__one_of"]
        constraint = models.CheckConstraint(
            condition=models.Q((f"{column}__{lookup}", values)), name=name
        )
        schema_editor.execute(
            f"ALTER TABLE {schema_editor.quote_name(model._meta.db_table)} "
            f"DROP CONSTRAINT {schema_editor.quote_name(name)}"
        )
        schema_editor.add_constraint(model, constraint)


def fold(apps, schema_editor):
    _replace(apps, schema_editor, "one_of")


def unfold(apps, schema_editor):
    _replace(apps, schema_editor, "in")


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0024_effect_outcome_in_place"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="effect",
                    name="effect_policy_valid",
                ),
                migrations.RemoveConstraint(
                    model_name="effect",
                    name="effect_status_valid",
                ),
                migrations.RemoveConstraint(
                    model_name="event",
                    name="event_type_valid",
                ),
                migrations.RemoveConstraint(
                    model_name="run",
                    name="run_status_valid",
                ),
                migrations.AddConstraint(
                    model_name="effect",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__one_of",
                                [
                                    "intent",
                                    "confirmed",
                                    "failed",
                                    "unknown",
                                    "abandoned",
                                    "conflict",
                                ],
                            )
                        ),
                        name="effect_status_valid",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="effect",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("policy__one_of", ["SAFE", "IDEMPOTENT", "RECONCILE_FIRST", "NEVER"])
                        ),
                        name="effect_policy_valid",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="event",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            (
                                "type__one_of",
                                [
                                    "RUN_CREATED",
                                    "STARTED",
                                    "TOOL_CALLED",
                                    "TOOL_RESULT",
                                    "VERIFIED",
                                    "FAILED",
                                    "INTERRUPTED",
                                    "NEEDS_APPROVAL",
                                    "PLAN_APPROVED",
                                    "RECONCILED",
                                    "RESUMED",
                                    "BRANCHED",
                                    "SUCCEEDED",
                                    "LEDGER_EDITED",
                                    "PLAN_KEPT",
                                    "PLAN_DEVIATED",
                                    "GATE_OPENED",
                                    "HUMAN_ANSWERED",
                                    "ACKNOWLEDGED",
                                    "TARGET_ASKED",
                                    "GATE_REOPENED",
                                    "CLOSED_OUT",
                                    "DIVERGED",
                                    "VALUE_RECORDED",
                                ],
                            )
                        ),
                        name="event_type_valid",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="run",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__one_of",
                                [
                                    "pending",
                                    "running",
                                    "interrupted",
                                    "failed",
                                    "needs_approval",
                                    "resuming",
                                    "waiting",
                                    "succeeded",
                                    "superseded",
                                    "closed",
                                ],
                            )
                        ),
                        name="run_status_valid",
                    ),
                ),
            ]
        ),
        migrations.RunPython(fold, unfold),
    ]

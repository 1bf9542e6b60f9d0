"""Effect rows are written by the ledger only: a database trigger refuses any INSERT, UPDATE
or DELETE of runs_effect that does not come from the append path (or a supervisor's edit,
which goes through it), as the events' triggers (0002) refuse any change to an event.

The append path says so for its own writes: on SQLite a per-connection flag that
resumer_ledger() reads (runs/apps.py registers it on Resumer's connections only, so another
client fails closed), on PostgreSQL the transaction-local setting resumer.ledger, set inside
the very statement that writes the effect (runs/ledger/sql/). maintenance() lifts both, as it
lifts the events' triggers. This is the same guard the events have, against a plain UPDATE
by someone who can write the database; verify_chain and the planner still check every row
against its events (runs/ledger/derived.py) for whoever works around it.

Note: SQLite drops a table's triggers when a migration rebuilds it; a later migration that
alters runs_effect must install these again (sqlite_sql() below).
"""

from django.db import migrations

TABLE = "runs_effect"


def sqlite_sql():
    forward, backward = [], []
    for op in ("INSERT", "UPDATE", "DELETE"):
        name = f"{TABLE}_ledger_only_{op.lower()}"
        forward.append(
            f"CREATE TRIGGER {name} BEFORE {op} ON {TABLE} "
            f"WHEN resumer_maintenance() = 0 AND resumer_ledger() = 0 "
            f"BEGIN SELECT RAISE(ABORT, '{TABLE} is written by the ledger only: {op} refused'); "
            f"END;"
        )
        backward.append(f"DROP TRIGGER IF EXISTS {name};")
    return forward, backward


PG_FUNCTION = """
CREATE OR REPLACE FUNCTION resumer_ledger_only() RETURNS trigger AS $$
BEGIN
    IF current_setting('resumer.maintenance', true) = 'on'
       OR current_setting('resumer.ledger', true) = 'on' THEN
        IF TG_LEVEL = 'STATEMENT' THEN RETURN NULL; END IF;
        IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is written by the ledger only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""


def pg_sql():
    forward = [
        PG_FUNCTION,
        f"CREATE TRIGGER {TABLE}_ledger_only BEFORE INSERT OR UPDATE OR DELETE ON {TABLE} "
        f"FOR EACH ROW EXECUTE FUNCTION resumer_ledger_only();",
        f"CREATE TRIGGER {TABLE}_no_truncate BEFORE TRUNCATE ON {TABLE} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION resumer_ledger_only();",
    ]
    backward = [
        f"DROP TRIGGER IF EXISTS {TABLE}_ledger_only ON {TABLE};",
        f"DROP TRIGGER IF EXISTS {TABLE}_no_truncate ON {TABLE};",
        "DROP FUNCTION IF EXISTS resumer_ledger_only();",
    ]
    return forward, backward


def _run(schema_editor, which: int) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        statements = sqlite_sql()[which]
    elif vendor == "postgresql":
        statements = pg_sql()[which]
    else:
        raise RuntimeError(f"Resumer supports SQLite and PostgreSQL, not {vendor}")
    for sql in statements:
        # params=None: the plpgsql body has '%' placeholders of its own (RAISE).
        schema_editor.execute(sql, params=None)


def install(apps, schema_editor):
    _run(schema_editor, 0)


def remove(apps, schema_editor):
    _run(schema_editor, 1)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0013_deviation_acknowledged_and_target_asked"),
    ]

    operations = [migrations.RunPython(install, remove)]

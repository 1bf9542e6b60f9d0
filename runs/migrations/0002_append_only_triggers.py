"""Database triggers that make events and checkpoints append-only below the ORM.

SQLite: BEFORE UPDATE/DELETE triggers abort unless resumer_maintenance() returns 1. Only
Resumer's own connections define that function (runs/apps.py), and only maintenance()
makes it return 1, so raw SQL, another client, or the sqlite3 shell are refused.

PostgreSQL: one trigger function rejects UPDATE, DELETE and TRUNCATE unless the session set
resumer.maintenance = 'on' (again only maintenance(), runs/maintenance.py).

Note: SQLite rebuilds a table on most ALTERs and drops its triggers; a later migration that
alters these tables must recreate them.
"""

from django.db import migrations

TABLES = ("runs_event", "runs_checkpoint")


def sqlite_sql():
    forward, backward = [], []
    for table in TABLES:
        for op in ("UPDATE", "DELETE"):
            name = f"{table}_no_{op.lower()}"
            forward.append(
                f"CREATE TRIGGER {name} BEFORE {op} ON {table} "
                f"WHEN resumer_maintenance() = 0 "
                f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: {op} refused'); END;"
            )
            backward.append(f"DROP TRIGGER IF EXISTS {name};")
    return forward, backward


PG_FUNCTION = """
CREATE OR REPLACE FUNCTION resumer_append_only() RETURNS trigger AS $$
BEGIN
    IF current_setting('resumer.maintenance', true) = 'on' THEN
        IF TG_LEVEL = 'STATEMENT' THEN RETURN NULL; END IF;
        IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""


def pg_sql():
    forward, backward = [PG_FUNCTION], []
    for table in TABLES:
        forward.append(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION resumer_append_only();"
        )
        forward.append(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION resumer_append_only();"
        )
        backward += [
            f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};",
            f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};",
        ]
    backward.append("DROP FUNCTION IF EXISTS resumer_append_only();")
    return forward, backward


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        statements = sqlite_sql()[0]
    elif vendor == "postgresql":
        statements = pg_sql()[0]
    else:
        raise RuntimeError(f"Resumer supports SQLite and PostgreSQL, not {vendor}")
    for sql in statements:
        # params=None: the plpgsql body contains '%' placeholders of its own (RAISE), which
        # psycopg would otherwise try to interpolate.
        schema_editor.execute(sql, params=None)


def uninstall(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    statements = sqlite_sql()[1] if vendor == "sqlite" else pg_sql()[1]
    for sql in statements:
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]
    operations = [migrations.RunPython(install, uninstall)]

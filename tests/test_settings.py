"""Settings come from the environment. Each case starts `manage.py` in a subprocess with its
own environment, so what is tested is what a deployment gets, not this test run's settings."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import ROOT

# Variables this test process (or its CI) may carry that would change what a subprocess sees.
SCRUBBED = (
    "DATABASE_URL",
    "RESUMER_ENV",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "DEBUG",
    "RESUMER_CHAIN_KEY",
    "RESUMER_PIPELINES",
    "RESUMER_CALL_HOOKS",
    "RESUMER_WEBHOOK_URL",
    "RESUMER_WEBHOOK_SECRET",
    "RESUMER_NOTIFY_EMAILS",
    "RESUMER_NOTIFY_BACKOFF",
    "CSRF_TRUSTED_ORIGINS",
    "RESUMER_SQLITE_SYNCHRONOUS",
)


def manage(*args: str, env: dict[str, str], var_dir: Path) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    base.update(RESUMER_VAR_DIR=str(var_dir), **env)
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


def shell_json(code: str, *, env: dict[str, str], var_dir: Path) -> dict:
    result = manage("shell", "-c", code, env=env, var_dir=var_dir)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


DATABASE_SETTINGS = """
import json
from django.conf import settings
db = settings.DATABASES["default"]
print(json.dumps({k: db.get(k) for k in ("ENGINE", "NAME", "HOST", "PORT", "USER", "OPTIONS")},
                 default=str))
"""

SQLITE_BEHAVIOUR = """
import json, sqlite3
from django.db import connection, transaction
with connection.cursor() as cursor:
    cursor.execute("PRAGMA journal_mode")
    journal = cursor.fetchone()[0]
# IMMEDIATE: entering atomic() must already hold the write lock, before anything is written.
# A second client asking for it without waiting is then refused.
with transaction.atomic():
    other = sqlite3.connect(connection.settings_dict["NAME"], timeout=0)
    try:
        other.execute("BEGIN IMMEDIATE")
        held = False
        other.rollback()
    except sqlite3.OperationalError as exc:
        held = "locked" in str(exc)
    finally:
        other.close()
print(json.dumps({"vendor": connection.vendor, "journal_mode": journal,
                  "write_lock_held_at_begin": held}))
"""


def test_sqlite_is_the_default_with_wal_and_immediate_transactions(tmp_path):
    found = shell_json(SQLITE_BEHAVIOUR, env={}, var_dir=tmp_path)
    assert found == {"vendor": "sqlite", "journal_mode": "wal", "write_lock_held_at_begin": True}


SYNCHRONOUS = """
import json
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("PRAGMA synchronous")
    level = cursor.fetchone()[0]
print(json.dumps({"synchronous": level}))
"""


@pytest.mark.parametrize(
    ("env", "level"),
    [
        ({}, 1),
        ({"RESUMER_SQLITE_SYNCHRONOUS": "full"}, 2),
        ({"RESUMER_SQLITE_SYNCHRONOUS": "NORMAL"}, 1),
    ],
    ids=["default-normal", "full", "normal"],
)
def test_sqlite_commits_wait_for_the_disk_as_resumer_sqlite_synchronous_says(tmp_path, env, level):
    # PRAGMA synchronous answers 1 for NORMAL and 2 for FULL.
    assert shell_json(SYNCHRONOUS, env=env, var_dir=tmp_path) == {"synchronous": level}


def test_an_unknown_sqlite_synchronous_level_stops_manage_py_at_start_up(tmp_path):
    result = manage("check", env={"RESUMER_SQLITE_SYNCHRONOUS": "OFF"}, var_dir=tmp_path)
    assert result.returncode != 0
    assert "runs.E010" in result.stderr and "'OFF'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_the_default_sqlite_file_lives_in_the_var_dir(tmp_path):
    found = shell_json(DATABASE_SETTINGS, env={}, var_dir=tmp_path)
    assert found["ENGINE"] == "django.db.backends.sqlite3"
    assert found["NAME"] == str(tmp_path / "resumer.sqlite3")
    assert found["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


def test_database_url_switches_to_postgresql(tmp_path):
    found = shell_json(
        DATABASE_SETTINGS,
        env={"DATABASE_URL": "postgres://resumer:s3cret@db.example:5433/resumer_prod"},
        var_dir=tmp_path,
    )
    # Django's backend, with outcomes sent unanswered (resumer/postgresql/base.py).
    assert found["ENGINE"] == "resumer.postgresql"
    assert (found["NAME"], found["HOST"], found["PORT"], found["USER"]) == (
        "resumer_prod",
        "db.example",
        5433,
        "resumer",
    )
    # The SQLite-only options must not leak into a PostgreSQL connection.
    assert "transaction_mode" not in (found["OPTIONS"] or {})


def test_answer_later_off_keeps_djangos_own_postgresql_backend(tmp_path):
    found = shell_json(
        DATABASE_SETTINGS,
        env={
            "DATABASE_URL": "postgres://resumer@db.example:5432/resumer_prod",
            "RESUMER_PG_ANSWER_LATER": "0",
        },
        var_dir=tmp_path,
    )
    assert found["ENGINE"] == "django.db.backends.postgresql"
    assert found["OPTIONS"] == {"server_side_binding": True, "prepare_threshold": 5}


def test_check_deploy_passes_in_production(tmp_path):
    # A real key: Django's own security.W009 rejects a short one such as "x" by design.
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        env={
            "RESUMER_ENV": "production",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "example.com",
            "RESUMER_CHAIN_KEY": secrets.token_urlsafe(32),
        },
        var_dir=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_without_a_chain_key(tmp_path):
    result = manage(
        "check",
        env={
            "RESUMER_ENV": "production",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "example.com",
        },
        var_dir=tmp_path,
    )
    assert result.returncode != 0
    assert "runs.E009" in result.stderr
    assert "RESUMER_CHAIN_KEY is not set" in result.stderr


def test_production_without_a_chain_key_only_warns_when_it_opted_out(tmp_path):
    result = manage(
        "check",
        env={
            "RESUMER_ENV": "production",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "example.com",
            "RESUMER_ALLOW_UNANCHORED": "1",
        },
        var_dir=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "runs.W002" in result.stderr + result.stdout


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    # A system check says so, not a traceback from settings.py; `check --deploy` as well.
    for deploy in ([], ["--deploy"]):
        result = manage(
            "check",
            *deploy,
            env={"RESUMER_ENV": "production", "ALLOWED_HOSTS": "example.com"},
            var_dir=tmp_path,
        )
        assert result.returncode != 0
        assert "runs.E005" in result.stderr
        assert "SECRET_KEY is not set" in result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("env", "check_id", "says"),
    [
        (
            {"RESUMER_WEBHOOK_URL": "https://hooks.example/r"},
            "runs.E006",
            "RESUMER_WEBHOOK_SECRET is not",
        ),
        (
            {"RESUMER_WEBHOOK_URL": "hooks.example/r", "RESUMER_WEBHOOK_SECRET": "s3cret"},
            "runs.E007",
            "'hooks.example/r' is not an http:// or https:// URL",
        ),
        ({"RESUMER_NOTIFY_BACKOFF": "10,-1"}, "runs.E008", "not -1"),
        ({"RESUMER_NOTIFY_BACKOFF": "10,1m"}, "runs.E008", "not '1m'"),
    ],
    ids=["webhook-without-secret", "webhook-not-http", "negative-backoff", "backoff-not-seconds"],
)
def test_notification_settings_that_make_no_sense_stop_manage_py_at_start_up(
    tmp_path, env, check_id, says
):
    result = manage("check", env=env, var_dir=tmp_path)
    assert result.returncode != 0
    assert check_id in result.stderr and says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


LIST_SETTINGS = """
import json
from django.conf import settings
names = ("ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "RESUMER_NOTIFY_EMAILS", "RESUMER_NOTIFY_BACKOFF")
print(json.dumps({name: getattr(settings, name) for name in names}))
"""


def test_list_settings_are_comma_separated_with_blanks_dropped(tmp_path):
    env = {
        "ALLOWED_HOSTS": " a.example, b.example,",
        "CSRF_TRUSTED_ORIGINS": "https://a.example",
        "RESUMER_NOTIFY_EMAILS": "ops@a.example, ,oncall@a.example",
        "RESUMER_NOTIFY_BACKOFF": " 5, 0,",
    }
    assert shell_json(LIST_SETTINGS, env=env, var_dir=tmp_path) == {
        "ALLOWED_HOSTS": ["a.example", "b.example"],
        "CSRF_TRUSTED_ORIGINS": ["https://a.example"],
        "RESUMER_NOTIFY_EMAILS": ["ops@a.example", "oncall@a.example"],
        "RESUMER_NOTIFY_BACKOFF": [5, 0],
    }


PIPELINE_SETTINGS = """
import json
from django.conf import settings
print(json.dumps({"pipelines": settings.RESUMER_PIPELINES, "hooks": settings.RESUMER_CALL_HOOKS,
                  "demo": "demo" in settings.INSTALLED_APPS}))
"""


def test_the_demo_pipeline_is_the_default_with_its_app_and_fault_hooks(tmp_path):
    found = shell_json(PIPELINE_SETTINGS, env={}, var_dir=tmp_path)
    assert found == {
        "pipelines": ["demo.pipeline.content_pipeline"],
        "hooks": "demo.faults.FaultHooks",
        "demo": True,
    }


def test_resumer_pipelines_from_the_environment_leave_the_demo_out(tmp_path):
    env = {"RESUMER_PIPELINES": "acme.pipelines.blog, acme.pipelines.news,"}
    found = shell_json(PIPELINE_SETTINGS, env=env, var_dir=tmp_path)
    assert found == {
        "pipelines": ["acme.pipelines.blog", "acme.pipelines.news"],
        "hooks": "",
        "demo": False,
    }


def test_resumer_faults_brings_fault_injection_to_your_own_pipelines(tmp_path):
    env = {"RESUMER_PIPELINES": "acme.pipelines.blog", "RESUMER_FAULTS": "1"}
    found = shell_json(PIPELINE_SETTINGS, env=env, var_dir=tmp_path)
    assert found == {
        "pipelines": ["acme.pipelines.blog"],
        "hooks": "demo.faults.FaultHooks",
        "demo": True,
    }


def test_a_pipeline_entry_that_does_not_import_stops_manage_py_at_start_up(tmp_path):
    result = manage("check", env={"RESUMER_PIPELINES": "acme.nowhere.blog"}, var_dir=tmp_path)
    assert result.returncode != 0
    assert "runs.E001" in result.stderr and "acme.nowhere.blog" in result.stderr


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"RESUMER_LEASE_TTL": "abc"}, "RESUMER_LEASE_TTL is 'abc', which is not a number"),
        ({"RESUMER_JOB_TIMEOUT": "1.5"}, "RESUMER_JOB_TIMEOUT is '1.5', which is not a whole"),
        ({"RESUMER_SWEEP_INTERVAL": "0"}, "RESUMER_SWEEP_INTERVAL is 0.0; it must be greater"),
        ({"RESUMER_LEASE_TTL": "-5"}, "RESUMER_LEASE_TTL is -5.0; it must be greater than 0"),
        ({"RESUMER_QUEUE_GRACE": "inf"}, "RESUMER_QUEUE_GRACE is inf; it must be 0 or more"),
    ],
    ids=["not-a-number", "not-whole", "a-sweeper-that-spins", "a-lease-that-is-lost", "inf"],
)
def test_a_number_that_makes_no_sense_stops_manage_py_naming_it(tmp_path, env, said):
    result = manage("check", env=env, var_dir=tmp_path)
    assert result.returncode != 0
    assert "runs.E011" in result.stderr and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_database_url_that_names_no_database_is_said_as_such(tmp_path):
    result = manage("check", env={"DATABASE_URL": "garbage"}, var_dir=tmp_path)
    assert result.returncode != 0
    assert "DATABASE_URL is 'garbage', which names no database" in result.stderr, result.stderr


def test_the_web_server_refuses_to_start_where_manage_py_would_refuse(tmp_path):
    # gunicorn imports resumer.wsgi, which runs the start-up checks: production without the
    # chain key does not serve (it would write heads nobody can verify).
    base = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    base.update(
        RESUMER_VAR_DIR=str(tmp_path),
        RESUMER_ENV="production",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="example.com",
    )
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "resumer.wsgi", "--bind", "127.0.0.1:0"],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "runs.E009" in result.stderr and "RESUMER_CHAIN_KEY is not set" in result.stderr

"""A command line answers at once (issue 48): the settings, the app registry, the command list
and Resumer's commands load none of the heavy libraries only some code paths use, and
`start_run --help` lists the pipelines' inputs. Each case starts `manage.py` in a subprocess
that writes down, as it exits, every module the command imported: what is asserted is what
the command line loads, never how long it took (bench/cli_start.py measures that)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.support.processes import ROOT

# The model SDK, the API's library and its pydantic, the OTLP exporter (protobuf, requests),
# and on SQLite PostgreSQL's driver (on PostgreSQL, Django's backend imports it as the models
# load): what a command line must not import to start.
ON_SQLITE = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
HEAVY = ("openai", "ninja", "pydantic", "opentelemetry.exporter", "google.protobuf") + (
    ("psycopg",) if ON_SQLITE else ()
)
# Loaded by the pipelines' HTTP tools, which `start_run --help` imports to list the inputs.
CLIENT = "httpx"
# What a command that loads the pipelines may import besides: the demo's charge declares its
# arguments with a pydantic model (a pipeline's choice, not the command line's).
PIPELINES_NEED = ("pydantic",)


def heavy_beside_the_pipelines(imported: set[str]) -> list[str]:
    return heavy(imported, tuple(n for n in HEAVY if n not in PIPELINES_NEED))


# manage.py as `python manage.py ARGS` runs it, writing sys.modules to a file as it exits
# (after --help too: argparse's exit runs the atexit handlers).
PROBE = """
import atexit, json, runpy, sys
written = sys.argv.pop(1)
atexit.register(lambda: open(written, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def manage(tmp: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run manage.py; its result and the modules it imported."""
    written = tmp / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(written), str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result, set(json.loads(written.read_text()))


def heavy(imported: set[str], names: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in imported))


@pytest.mark.parametrize(
    "args", [("--help",), ("plan", "--help"), ("verify_chain", "--help")], ids=" ".join
)
def test_the_command_line_starts_without_the_heavy_libraries(tmp_path, args):
    result, imported = manage(tmp_path, *args)

    assert result.returncode == 0, result.stderr[-2000:]
    assert heavy(imported, (*HEAVY, CLIENT)) == []


def test_start_run_help_loads_the_pipelines_but_not_the_model_sdk(tmp_path):
    result, imported = manage(tmp_path, "start_run", "--help")

    assert result.returncode == 0, result.stderr[-2000:]
    assert "demo.pipeline" in imported
    assert heavy_beside_the_pipelines(imported) == []


def test_start_run_help_lists_each_pipelines_inputs_with_their_defaults(tmp_path):
    result, _ = manage(tmp_path, "start_run", "--help")

    words = " ".join(result.stdout.split())
    assert "pinned as the run starts): content topic=resumable-agents what the article" in words
    assert "facts=<its current version> version of the topic's fact sheet" in words
    assert "account=acct-42 platform=devblog model=<its current version> the language" in words
    assert "review=off on: an operator reviews the article" in words


def test_start_run_help_says_so_when_the_pipelines_do_not_load(tmp_path):
    result, _ = manage(tmp_path, "start_run", "--help", RESUMER_PIPELINES="acme.nowhere.blog")

    assert result.returncode == 0
    assert "The pipelines do not load (ModuleNotFoundError)" in result.stdout
    assert "Traceback" not in result.stderr


def test_start_run_checks_the_pipelines_without_loading_the_web_stack(tmp_path):
    result, imported = manage(tmp_path, "start_run", "no-such-pipeline", "--no-enqueue")

    assert result.returncode == 1
    assert "unknown pipeline 'no-such-pipeline'" in result.stderr
    assert "resumer.urls" not in imported
    assert heavy_beside_the_pipelines(imported) == []


def test_a_pipeline_entry_that_does_not_import_stops_start_run_at_its_checks(tmp_path):
    result, _ = manage(
        tmp_path, "start_run", "content", "--no-enqueue", RESUMER_PIPELINES="acme.nowhere.blog"
    )

    assert result.returncode != 0
    assert "runs.E001" in result.stderr and "acme.nowhere.blog" in result.stderr

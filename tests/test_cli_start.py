"""The command line (issue 48): `start_run --help` lists the pipelines' inputs. Each case
starts `manage.py` in a subprocess that writes down, as it exits, every module the command
imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.processes import ROOT

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

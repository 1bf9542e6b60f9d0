"""A worker loads, before its first job, what the command line leaves to first use: the
pipelines and the model SDK their model tools call (runs/execution/worker.py, warm_up)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.processes import ROOT

WARM_UP = """
import json, sys
import django
django.setup()
from runs.execution import worker
loaded = lambda: ["demo.pipeline" in sys.modules, "openai" in sys.modules]
before = loaded()
worker.warm_up()
print(json.dumps({"before": before, "after": loaded()}))
"""


def test_warm_up_loads_the_pipelines_and_the_model_sdk_the_worker_module_leaves_out():
    result = subprocess.run(
        [sys.executable, "-c", WARM_UP], cwd=ROOT, capture_output=True, text=True, timeout=120
    )

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "before": [False, False],
        "after": [True, True],
    }

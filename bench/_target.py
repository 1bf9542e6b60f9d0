"""The fleet benches' target: a folder (FLEET_METER) that meters paid calls, shared by the
Resumer pipeline (bench/_fleet_pipeline.py) and its DBOS twin (bench/_dbos_fleet.py). It
imports neither Django nor Resumer, so the DBOS side's own virtualenv can import it.

A paid call creates a file named by its delivery key (O_EXCL, so it is billed once), and a
second call with the same key is an idempotent replay that bills nothing but is written down
in `repeats`: "zero duplicate paid calls" is counted from one file per key, and no repeat.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

# Seconds each tool call waits, like a call to a remote API.
WAIT = float(os.environ.get("FLEET_TOOL_WAIT", "0.05"))


def meter() -> Path:
    path = Path(os.environ.get("FLEET_METER", "var/fleet-meter"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def bill(key: str, what: str) -> str:
    """The target receives a paid call: billed once per key, a repeat is recorded."""
    time.sleep(WAIT)
    path = meter() / key
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        with open(meter() / "repeats", "a") as handle:
            handle.write(f"{key} {what}\n")
    else:
        with os.fdopen(fd, "w") as handle:
            handle.write(what)
    return f"{what}-{key[:12]}"

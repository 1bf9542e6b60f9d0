"""Keep one child process running, as systemd's Restart=on-failure would: `manage.py work`
(the worker) and the demo's `manage.py demo_service` (its HTTP service) both run under it in
`make run`, so a demo crash (the worker kills itself) leaves the machine as a deployment would.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

RESTART_PAUSE = 1.0


def supervise(
    cmd: list[str], *, name: str, say: Callable[[str], None], cwd: str | None = None
) -> None:
    """Run `cmd`, and start it again RESTART_PAUSE seconds after it exits, until this process
    gets SIGTERM or SIGINT: then the child gets SIGTERM (RQ's warm shutdown, gunicorn's
    graceful one), is waited for, and the loop ends."""
    stopping = False
    child: subprocess.Popen | None = None

    def stop(signum, frame) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping:
        child = subprocess.Popen(cmd, cwd=cwd)
        code = child.wait()
        if stopping:
            break
        say(f"{name} exited with {code}; starting a new one in {RESTART_PAUSE:g} s")
        time.sleep(RESTART_PAUSE)

"""Start, stop and steer a demo service process: for tests, benches and the fault matrix.

    service = ServiceProcess(database=tmp / "service.sqlite3", log=tmp / "service.log")
    service.start()                      # a real gunicorn on a free port
    service.arm("publish", "drop")       # the next publish commits, then drops the connection
    service.count("render", key)         # billed renders under that key
    service.stop()                       # down: connections are refused until start()

Nothing here imports Django: it runs in the test process, which has Resumer's settings.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class ServiceProcess:
    """One `python -m demo_service` process (gunicorn master and worker, in their own process
    group). The port stays the same across stop() and start()."""

    def __init__(
        self,
        *,
        database: Path,
        log: Path,
        port: int | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.database = database
        self.log = log
        self.host = host
        self.port = port or free_port(host)
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, *, timeout: float = 60) -> None:
        if self.running:
            return
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "demo_service",
                    "--host",
                    self.host,
                    "--port",
                    str(self.port),
                    "--database",
                    f"sqlite:///{self.database}",
                ],
                cwd=ROOT,
                stdout=log,
                stderr=log,
                start_new_session=True,  # its own group: stop() ends master and worker
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the demo service exited with {self.proc.returncode}; its log:\n"
                    + self.log.read_text(errors="replace")[-4000:]
                )
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/_health", timeout=1, trust_env=False).is_success:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the demo service did not answer on {self.url}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Kill the service at once, as a crash or a lost machine would; afterwards its port
        refuses connections."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None
        deadline = time.monotonic() + 30
        while self._accepts() and time.monotonic() < deadline:
            time.sleep(0.05)  # the worker may outlive its master for a moment

    def _accepts(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1):
                return True
        except OSError:
            return False

    # --- the control endpoints ----------------------------------------------------------

    def _control(self, method: str, path: str, **kwargs: Any) -> Any:
        response = httpx.request(method, f"{self.url}{path}", timeout=10, trust_env=False, **kwargs)
        response.raise_for_status()
        return response.json()

    def reset(self) -> None:
        """Forget all objects, stored responses, meter rows and faults."""
        self._control("POST", "/_reset")

    def arm(
        self,
        op: str,
        mode: str,
        *,
        key: str = "",
        seconds: float = 0,
        status: int = 503,
        times: int = 1,
    ) -> dict[str, Any]:
        """Arm a fault for the next `times` requests of `op` (and `key`): mode "drop" commits
        then drops the connection, "delay" commits then answers after `seconds`, "error"
        answers `status` before committing anything."""
        spec: dict[str, Any] = {"op": op, "mode": mode, "key": key, "times": times}
        if mode == "delay":
            spec["seconds"] = seconds
        if mode == "error":
            spec["status"] = status
        return self._control("POST", "/_faults", json=spec)

    def faults(self) -> list[dict[str, Any]]:
        return self._control("GET", "/_faults")["data"]

    def meter(self, op: str | None = None, key: str | None = None) -> list[dict[str, Any]]:
        params = {k: v for k, v in (("op", op), ("key", key)) if v is not None}
        return self._control("GET", "/_meter", params=params)["data"]

    def count(self, op: str, key: str | None = None, outcome: str = "billed") -> int:
        """How many requests of `op` (under `key`) had `outcome` (billed by default)."""
        return sum(row["count"] for row in self.meter(op, key) if row["outcome"] == outcome)

    def articles(self, **filters: str) -> list[dict[str, Any]]:
        return self._control("GET", "/v1/articles", params=filters)["data"]

    def charges(self, **filters: str) -> list[dict[str, Any]]:
        return self._control("GET", "/v1/charges", params=filters)["data"]

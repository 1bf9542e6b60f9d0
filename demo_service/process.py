"""Start, stop and steer a demo service process: for tests, benches, the fault matrix and
`make run`.

    service = ServiceProcess(database=tmp / "service.sqlite3", log=tmp / "service.log")
    service.start()                      # a real gunicorn on a free port
    service.arm("publish", "drop")       # the next publish commits, then drops the connection
    service.count("render", key)         # billed renders under that key
    service.stop()                       # down: connections are refused until start()

    world = ServiceClient("http://127.0.0.1:8001")   # the same questions, of any running one
    marks = world.marks()                # ... act ...
    world.renders(after=marks["render"]) # what was rendered since

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


class ServiceClient:
    """The service's control endpoints and collections, as a test or a supervisor reads them
    (never a pipeline: it only speaks through its HTTP tools)."""

    def __init__(self, url: str) -> None:
        self._url = url.rstrip("/")

    @property
    def url(self) -> str:
        return self._url

    def _control(self, method: str, path: str, **kwargs: Any) -> Any:
        response = httpx.request(method, f"{self.url}{path}", timeout=10, trust_env=False, **kwargs)
        response.raise_for_status()
        return response.json()

    def answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/_health", timeout=1, trust_env=False).is_success
        except httpx.TransportError:
            return False

    def reset(self) -> None:
        """Forget all objects, stored responses, meter rows and faults."""
        self._control("POST", "/_reset")

    def state(self) -> bytes:
        """Everything the service holds, as a document put_state() takes back."""
        response = httpx.get(f"{self.url}/_state", timeout=30, trust_env=False)
        response.raise_for_status()
        return response.content

    def put_state(self, document: bytes) -> None:
        """Replace everything the service holds by what state() returned."""
        self._control("PUT", "/_state", content=document)

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

    def set_limit(self, account: str, limit: str) -> dict[str, Any]:
        """The most the card processor charges `account` at once: above it, 402 declined."""
        return self._control("POST", "/_limits", json={"account": account, "limit": limit})

    def faults(self) -> list[dict[str, Any]]:
        return self._control("GET", "/_faults")["data"]

    def disarm(self) -> None:
        self._control("DELETE", "/_faults")

    def marks(self) -> dict[str, int]:
        """The newest row number of each collection ("render", "upload", "publish",
        "charge", "meeting", "mail") and of the meter ("meter"): pass one back as `after`."""
        return self._control("GET", "/_marks")

    def meter(
        self, op: str | None = None, key: str | None = None, *, after: int | None = None
    ) -> list[dict[str, Any]]:
        params = {k: v for k, v in (("op", op), ("key", key), ("after", after)) if v is not None}
        return self._control("GET", "/_meter", params=params)["data"]

    def count(
        self,
        op: str,
        key: str | None = None,
        outcome: str | None = "billed",
        *,
        after: int | None = None,
    ) -> int:
        """How many requests of `op` (under `key`, after meter row `after`) had `outcome`
        (billed by default; None: any outcome)."""
        return sum(
            row["count"]
            for row in self.meter(op, key, after=after)
            if outcome is None or row["outcome"] == outcome
        )

    def renders(self, **filters: Any) -> list[dict[str, Any]]:
        return self._control("GET", "/v1/renders", params=filters)["data"]

    def assets(self, **filters: Any) -> list[dict[str, Any]]:
        return self._control("GET", "/v1/assets", params=filters)["data"]

    def articles(self, **filters: Any) -> list[dict[str, Any]]:
        return self._control("GET", "/v1/articles", params=filters)["data"]

    def charges(self, **filters: Any) -> list[dict[str, Any]]:
        return self._control("GET", "/v1/charges", params=filters)["data"]

    def meetings(self, **filters: Any) -> list[dict[str, Any]]:
        return self._control("GET", "/v1/meetings", params=filters)["data"]

    def mail(self, **filters: Any) -> list[dict[str, Any]]:
        return self._control("GET", "/v1/mail", params=filters)["data"]

    def schedule(self, meeting: dict[str, Any]) -> dict[str, Any]:
        """Put a meeting in the calendar, as its owner would (a day the agent finds busy)."""
        return self._control("POST", "/v1/meetings", json=meeting)

    def script(
        self,
        name: str,
        steps: list[dict[str, Any]] | None = None,
        *,
        conversations: list[list[dict[str, Any]]] | None = None,
    ) -> str:
        """Register a script for the scripted model (demo_service/scripts.py): `steps` that
        every conversation follows, or one list of steps per conversation. Returns the model
        name that follows it."""
        body = {"name": name, **({"steps": steps} if steps is not None else {})}
        if conversations is not None:
            body["conversations"] = conversations
        return self._control("POST", "/v1/scripts", json=body)["model"]

    def publish(self, article: dict[str, Any]) -> dict[str, Any]:
        """Publish as anyone may (by hand, or a request that arrives late)."""
        return self._control("POST", "/v1/articles", json=article)

    def edit_article(self, article_id: str, **changes: str) -> dict[str, Any]:
        """What an editor does to a live article: title, body or its delivery key."""
        return self._control("PATCH", f"/v1/articles/{article_id}", json=changes)

    def delete_article(self, article_id: str) -> None:
        self._control("DELETE", f"/v1/articles/{article_id}")


class ServiceProcess(ServiceClient):
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
        super().__init__(f"http://{self.host}:{self.port}")

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
            if self.answers():
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

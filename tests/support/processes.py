"""Real processes for the tests and the fault matrix: `rqworker` processes on this process's
database and Redis, a redis-server of a test's own, and waiting on them.

Nothing here needs pytest, and nothing touches Django before it is used: the fault matrix's
script imports this module before django.setup().
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from tests.support import forkserver
from tests.support.forkserver import ForkServer

ROOT = Path(__file__).resolve().parents[2]


class Timeout(AssertionError):
    pass


class WorkersBroke(AssertionError):
    """Every worker exited with an error (e.g. it could not even import the project)."""


# Whether the running test may start worker processes: pytest sets it per test from the test's
# `workers` marker (tests/conftest.py); a script (the fault matrix) leaves it on.
starting_workers_allowed = True

# Worker pools to watch while waiting (see Workers.raise_if_broken).
_LIVE_POOLS: weakref.WeakSet[Workers] = weakref.WeakSet()


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float = 60,
    what: str = "condition",
    watch_workers: bool = True,
) -> Any:
    """Poll until predicate() is truthy. The timeout only bounds a hung test; nothing asserts
    on how long anything took. If every worker has died of an error meanwhile, say so at once
    instead of waiting out the timeout (unless `watch_workers` is off: waiting on something
    the workers' health says nothing about, such as a Redis coming back)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for pool in list(_LIVE_POOLS) if watch_workers else ():
            pool.raise_if_broken(what)
        if time.monotonic() > deadline:
            raise Timeout(f"timed out waiting for {what}")
        time.sleep(0.05)


def worker_env(redis_url: str | None = None) -> dict[str, str]:
    """The environment that makes a worker process use this process's database, media,
    queue, pipelines, lease timings and demo service (and `redis_url`, or the configured
    Redis)."""
    env = dict(os.environ)
    # pytest's name for the test and phase running now: no worker reads it, and it would make
    # every test's environment differ from the fork server's (tests/support/forkserver.py).
    env.pop("PYTEST_CURRENT_TEST", None)
    env.update(
        DATABASE_URL=database_url(),
        REDIS_URL=redis_url or settings.REDIS_URL,
        MEDIA_ROOT=str(settings.MEDIA_ROOT),
        RESUMER_LEASE_TTL=str(settings.RESUMER_LEASE_TTL),
        RESUMER_SWEEP_INTERVAL=str(settings.RESUMER_SWEEP_INTERVAL),
        RESUMER_QUEUE_GRACE=str(settings.RESUMER_QUEUE_GRACE),
        RESUMER_QUEUE=settings.RESUMER_QUEUE,
        DEMO_SERVICE_URL=settings.DEMO_SERVICE_URL,
        PYTHONUNBUFFERED="1",
    )
    return env


def database_url() -> str:
    """A URL that points a worker process at the database this process is using."""
    conf = connection.settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{conf['NAME']}"
    user = conf.get("USER") or ""
    password = f":{conf['PASSWORD']}" if conf.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    host = conf.get("HOST") or "127.0.0.1"
    return f"postgres://{auth}{host}:{conf.get('PORT') or 5432}/{conf['NAME']}"


# The fork servers of this process (tests/support/forkserver.py), one for each environment
# workers were started in but for what a fork follows, most recently used last. A test that
# starts its workers with a pipeline of its own (RESUMER_PIPELINES, an SDK's example on
# PYTHONPATH) gets a server of its own: its first worker costs what a new interpreter costs,
# and the worker it starts after a kill, or the next test of its module, is a fork. At most
# FORK_SERVERS are kept (each holds the imports of a worker, over 100 MB).
FORK_SERVERS = 4
_fork_servers: dict[tuple[tuple[str, str], ...], ForkServer] = {}


def fork_server_for(env: dict[str, str]) -> ForkServer | None:
    if not forkserver.enabled():
        return None
    kind = tuple(sorted((k, v) for k, v in env.items() if k not in forkserver.FOLLOWED))
    server = _fork_servers.pop(kind, None)
    if server is None:
        while len(_fork_servers) >= FORK_SERVERS:
            _fork_servers.pop(next(iter(_fork_servers))).close()
        server = ForkServer(env)
    _fork_servers[kind] = server
    return server if forkserver.differences(server.env, env) is not None else None


def stop_fork_server() -> None:
    while _fork_servers:
        _fork_servers.popitem()[1].close()


Process = subprocess.Popen | forkserver.ForkedProcess


class Workers:
    """Starts real `manage.py rqworker` processes (ResumerWorker: SimpleWorker + sweeper) on
    the database this process uses and the given Redis, and makes sure none outlives it."""

    def __init__(
        self, log_dir: Path, *, redis_url: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.redis_url = redis_url or settings.REDIS_URL
        self.extra_env = dict(env or {})
        self.procs: list[Process] = []
        self.log_paths: dict[int, Path] = {}
        self._started_at: dict[int, float] = {}
        self.started = 0  # numbers the log files across cases
        _LIVE_POOLS.add(self)

    def env(self) -> dict[str, str]:
        return {**worker_env(self.redis_url), **self.extra_env}

    def start(
        self, label: str = "", *, burst: bool = False, env: dict[str, str] | None = None
    ) -> Process:
        if not starting_workers_allowed:
            raise AssertionError(
                "this test starts worker processes: mark it @pytest.mark.workers (or use the "
                "workers fixture), so that `make test-fast` leaves it out"
            )
        self.started += 1
        name = f"worker-{self.started:03d}{'-' + label if label else ''}.log"
        path = self.log_dir / name.replace("/", "_")
        log = open(path, "wb")  # noqa: SIM115 - handed to the child, closed with it
        from runs.execution import worker  # Django is set up by now

        command, full_env = worker.command(burst=burst), {**self.env(), **(env or {})}
        server = fork_server_for(full_env)
        if server is not None:
            log.close()
            proc = server.spawn(command, path, full_env)
        else:
            proc = subprocess.Popen(command, cwd=ROOT, env=full_env, stdout=log, stderr=log)
            log.close()
        self.procs.append(proc)
        self.log_paths[proc.pid] = path
        self._started_at[proc.pid] = time.monotonic()
        return proc

    def started_at(self, proc: Process) -> float:
        """When the process was started (time.monotonic())."""
        return self._started_at[proc.pid]

    def raise_if_broken(self, what: str) -> None:
        """Raise WorkersBroke when workers were started, none is alive, and one exited with
        an error status (a SIGKILL or a clean exit is what the tests themselves cause)."""
        codes = [proc.poll() for proc in self.procs]
        if not codes or None in codes or not any(c is not None and c > 0 for c in codes):
            return
        broken = next(p for p in self.procs if (p.poll() or 0) > 0)
        tail = "\n".join(self.log_of(broken).splitlines()[-15:])
        raise WorkersBroke(
            f"while waiting for {what}, every worker exited; worker {broken.pid} with status "
            f"{broken.returncode}:\n{tail}"
        )

    def log_of(self, proc: Process) -> str:
        path = self.log_paths.get(proc.pid)
        return path.read_text(errors="replace") if path and path.exists() else ""

    def stop(self, proc: Process) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)  # a test may have frozen it
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs:
            self.stop(proc)
        self.procs.clear()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivateRedis:
    """A redis-server of our own on a free port, without persistence, so a test can restart
    or flush it without touching the Redis anyone else uses."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        from runs.management.commands.ensure_redis import choose_binary

        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.binary = choose_binary()[0]
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self):
        import redis

        return redis.Redis.from_url(self.url(), socket_connect_timeout=1, socket_timeout=5)

    def start(self) -> PrivateRedis:
        log = open(self.workdir / f"redis-{self.port}.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=log,
            stderr=log,
        )
        log.close()
        # Workers that died while it was down (as RQ does) must not fail the wait for it.
        wait_for(
            self._answers,
            timeout=20,
            what=f"redis-server on port {self.port}",
            watch_workers=False,
        )
        return self

    def _answers(self) -> bool:
        client = self.client()
        try:
            return bool(client.ping())
        except Exception:
            return False
        finally:
            client.close()

    def kill(self) -> None:
        """Die the way a crashed Redis does: no shutdown, no save (there is nothing to save)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def flush(self) -> None:
        client = self.client()
        try:
            client.flushall()
        finally:
            client.close()

    def stop(self) -> None:
        self.kill()

"""Worker processes forked from a process that has already set Django up and imported what a
worker imports, instead of a new interpreter each time.

A worker process spends about two seconds of CPU importing Django, the admin, the API and the
model SDK before it takes a job, and the suite starts well over a hundred of them: on a
2-core machine that was a third of the whole suite's CPU. A fork server pays it once per test
process. Each fork is a real OS process that runs the real `manage.py rqworker` command (the
same argv, RQ's own loop, its own database and Redis connections, killed by real signals);
what it skips is the interpreter's start and the imports, which it inherits already done.

The server is started with the environment the workers get (worker_env()). A start whose
environment differs only in the variables of FOLLOWED (a test's own Redis or media folder)
is forked too, and the fork sets those settings as the test process itself does
(tests/support/isolation.py, the fault tests' private Redis); any other difference (lease
timings, another database) starts a new interpreter as before.
RESUMER_TEST_FORK_WORKERS=0 turns forking off altogether.

The server reaps its children and tells their exit status, so a forked worker is used like a
subprocess.Popen: pid, poll(), wait(), kill(), returncode (-N for a signal, as Popen says).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def enabled() -> bool:
    return os.environ.get("RESUMER_TEST_FORK_WORKERS", "1") != "0"


def _follow_redis(settings: Any, url: str) -> None:
    settings.REDIS_URL = url
    settings.RQ_QUEUES = {name: {**conf, "URL": url} for name, conf in settings.RQ_QUEUES.items()}


def _follow_media(settings: Any, folder: str) -> None:
    settings.MEDIA_ROOT = Path(settings.VAR_DIR) / folder  # as resumer/settings.py reads it


# The variables a fork may differ in from its server, and how each becomes its settings. Both
# are read at call time (django_rq, runs/enqueue.py, the storage on first use), never cached
# at import, so setting them before the command runs is what reading them at start does.
FOLLOWED = {"REDIS_URL": _follow_redis, "MEDIA_ROOT": _follow_media}


def differences(server_env: dict[str, str], env: dict[str, str]) -> dict[str, str] | None:
    """What a fork must set to have `env` instead of the server's, or None when that takes a
    new interpreter (a variable outside FOLLOWED differs)."""
    changed = {k for k in server_env.keys() | env.keys() if server_env.get(k) != env.get(k)}
    if not changed <= FOLLOWED.keys() or not all(k in env for k in changed):
        return None
    return {k: env[k] for k in changed}


class ForkServer:
    """One server process, spoken to over its stdin and stdout, a JSON line each way."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = dict(env)
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.forkserver"],
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._ask({"op": "ready"})

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server exited with {self.proc.wait()}")
        return json.loads(line)

    def spawn(self, argv: list[str], log: Path, env: dict[str, str]) -> ForkedProcess:
        """Fork a worker for `env`, which differences() allows."""
        changes = differences(self.env, env)
        assert changes is not None, "a new interpreter's environment"
        answer = self._ask({"op": "spawn", "argv": argv, "log": str(log), "env": changes})
        return ForkedProcess(self, answer["pid"], argv)

    def status(self, pid: int) -> int | None:
        return self._ask({"op": "status", "pid": pid})["status"]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the server's loop ends on end of input
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ForkedProcess:
    """A forked worker, used as subprocess.Popen is."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]) -> None:
        self.server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        import signal

        self.send_signal(signal.SIGTERM)


# --- the server process ------------------------------------------------------------------------


def _serve() -> None:
    import django

    django.setup()
    # What a worker imports before its first job: rqworker and the system checks it runs at
    # its start (they load the URLs, with the API, and the templates), the jobs, and what the
    # worker loads before it takes one (the pipelines and the SDKs their tools call).
    import django_rq.management.commands.rqworker  # noqa: F401
    from django.core.checks import run_checks

    import runs.jobs  # noqa: F401
    from runs.execution import worker

    run_checks()
    worker.warm_up()
    from django.db import connections

    connections.close_all()  # a fork must open its own

    exited: dict[int, int] = {}

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            exited[pid] = os.waitstatus_to_exitcode(status)

    for line in sys.stdin:
        request = json.loads(line)
        reap()
        if request["op"] == "spawn":
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(request["argv"], request["log"], request["env"])
            answer: dict[str, Any] = {"pid": pid}
        elif request["op"] == "status":
            answer = {"status": exited.get(request["pid"])}
        else:
            answer = {"ok": True}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def _child(argv: list[str], log: str, changes: dict[str, str]) -> None:
    """Become the worker: its own output file, no pipe to the server, the settings its
    environment differs in, then the command as `manage.py` would run it. Never returns."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(null)
        os.close(out)
        from django.conf import settings
        from django.core.management import execute_from_command_line

        os.environ.update(changes)
        for name, value in changes.items():
            FOLLOWED[name](settings, value)

        # argv is the command line a new interpreter would get: [python, manage.py, …].
        sys.argv = argv[1:]
        execute_from_command_line(argv[1:])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    _serve()

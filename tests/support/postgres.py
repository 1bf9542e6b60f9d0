"""A PostgreSQL cluster of a test's own: initdb in a temporary folder, its own free port and
socket folder, so a drill can crash it (an immediate shutdown: no checkpoint, the WAL not yet
written is gone) without touching the server anyone else uses.

Run as root, the binaries run as the `postgres` OS user (initdb refuses root), in a folder
that user owns. Nothing here needs Django or pytest.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.processes import free_port


def binaries() -> Path | None:
    """The newest PostgreSQL's bin folder on this machine (Debian's layout), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    found = [p for p in found if Path(p, "initdb").exists() and Path(p, "pg_ctl").exists()]
    return Path(found[-1]) if found else None


class PrivateCluster:
    def __init__(self, folder: Path | None = None) -> None:
        bin_dir = binaries()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL binaries under /usr/lib/postgresql/*/bin")
        self.bin = bin_dir
        self.folder = Path(folder or tempfile.mkdtemp(prefix="resumer-pg-"))
        self.folder.mkdir(parents=True, exist_ok=True)
        self.data = self.folder / "data"
        self.log = self.folder / "postgres.log"
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.folder, "postgres", "postgres")

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=self.folder)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed: {done.stderr or done.stdout}")

    def init(self) -> PrivateCluster:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        return self

    def start(self) -> PrivateCluster:
        """Start it (after a crash: crash recovery replays the WAL first) and wait for it."""
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c max_connections=100"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        return self

    def crash(self) -> None:
        """An immediate shutdown: every server process quits at once, as in a crash."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")

    def remove(self) -> None:
        with contextlib.suppress(RuntimeError):  # not running
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)

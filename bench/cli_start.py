"""How long `manage.py` takes to answer, beside a bare `django-admin --version` in the same venv.

    .venv/bin/python bench/cli_start.py               # 7 rounds
    .venv/bin/python bench/cli_start.py --rounds 15
    .venv/bin/python bench/cli_start.py --imports     # also: the heavy libraries each loads
    git worktree add /tmp/resumer-before <commit>
    .venv/bin/python bench/cli_start.py --against /tmp/resumer-before   # before and after

Each command is a new interpreter, as a shell script starting runs would start it:

  * `manage.py --help`, `manage.py plan --help`, `manage.py start_run --help`: the command
    line's start (settings, the app registry, the admin, the command's module; for
    `start_run --help`, the pipelines, whose inputs it lists);
  * `manage.py plan --groups` on an empty, migrated SQLite database: a real command that reads
    the database (its stored plans) and prints "No run needs a human.";
  * `manage.py check`: the system checks, which import every pipeline, the URLs, the API and
    the admin;
  * the baseline, `django-admin --version` without DJANGO_SETTINGS_MODULE: the interpreter and
    Django's command-line machinery, no settings and no apps: the floor of any `manage.py`.

Settings are a deployment's (DEBUG off, the bench helpers' child environment) with a scratch
SQLite database and var folder. One unmeasured round first fills the bytecode and file caches;
then every round runs each command once, in turn (in each checkout, with --against), so
outside load hits all of them alike. It prints the median wall time of each (lowest and
highest round beside it) and its ratio to the baseline's median.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

# What `--imports` looks for: libraries a command line should not need to load (the model
# SDK, the API's library and its pydantic, the OTLP exporter, the HTTP client, PostgreSQL's
# driver on SQLite). redis (with the OpenTelemetry metrics SDK it imports) and
# prometheus_client are not among them: django_rq, an installed app, imports them at start.
HEAVY = ("openai", "ninja", "pydantic", "opentelemetry.exporter", "httpx", "psycopg")
# A command as `python ARGS` runs it, writing sys.modules to a file as it exits.
PROBE = """
import atexit, json, runpy, sys
written = sys.argv.pop(1)
atexit.register(lambda: open(written, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

BASELINE = "django-admin --version"
COMMANDS = {
    BASELINE: None,
    "manage.py --help": ["--help"],
    "manage.py plan --help": ["plan", "--help"],
    "manage.py start_run --help": ["start_run", "--help"],
    "manage.py plan --groups (empty database)": ["plan", "--groups"],
    "manage.py check": ["check"],
}


def argv(name: str) -> list[str]:
    args = COMMANDS[name]
    if args is None:
        return [sys.executable, str(Path(sys.executable).with_name("django-admin")), "--version"]
    return [sys.executable, "manage.py", *args]


class Checkout:
    """A checkout whose commands are measured: its own scratch var folder and database."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.var_dir = _common.scratch_dir("resumer-clibench-")
        env = _common.child_env(f"sqlite:///{self.var_dir / 'bench.sqlite3'}", self.var_dir)
        bare = {k: v for k, v in env.items() if k != "DJANGO_SETTINGS_MODULE"}
        self.envs = {name: bare if COMMANDS[name] is None else env for name in COMMANDS}
        self.samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
            cwd=root,
            env=env,
            check=True,
        )

    def run(self, name: str) -> float:
        start = time.perf_counter()
        subprocess.run(
            argv(name), cwd=self.root, env=self.envs[name], check=True, stdout=subprocess.DEVNULL
        )
        return time.perf_counter() - start

    def heavy_imports(self, name: str) -> list[str]:
        """The HEAVY libraries the command imported."""
        written = self.var_dir / "modules.json"
        python, *args = argv(name)
        subprocess.run(
            [python, "-c", PROBE, str(written), *args],
            cwd=self.root,
            env=self.envs[name],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        loaded = json.loads(written.read_text())
        return [lib for lib in HEAVY if any(m == lib or m.startswith(lib + ".") for m in loaded)]

    def report(self, rounds: int, imports: bool) -> None:
        base = statistics.median(self.samples[BASELINE])
        print(f"\n{self.root}: wall time of a new process, median of {rounds} rounds, DEBUG off")
        print(f"{'command':44} {'median ms':>10} {'(low-high)':>14} {'× baseline':>10}")
        for name, times in self.samples.items():
            med = statistics.median(times)
            spread = f"({min(times) * 1000:.0f}-{max(times) * 1000:.0f})"
            print(f"{name:44} {med * 1000:10.0f} {spread:>14} {med / base:9.2f}×")
        if imports:
            print(f"of {', '.join(HEAVY)}, what each command imports:")
            for name in COMMANDS:
                print(f"{name:44} {', '.join(self.heavy_imports(name)) or '-'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--imports", action="store_true", help="list the heavy libraries too")
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout (e.g. an older commit's, from git worktree add): its commands "
        "alternate with this one's in every round, and its figures are printed first",
    )
    options = parser.parse_args()

    checkouts = [Checkout(root) for root in (options.against, _common.ROOT) if root]
    for checkout in checkouts:  # caches warm, not measured
        for name in COMMANDS:
            checkout.run(name)
    for _ in range(options.rounds):
        for name in COMMANDS:
            for checkout in checkouts:
                checkout.samples[name].append(checkout.run(name))
    for checkout in checkouts:
        checkout.report(options.rounds, options.imports)
        shutil.rmtree(checkout.var_dir, ignore_errors=True)


if __name__ == "__main__":
    main()

"""How long `manage.py` takes to answer, beside a bare `django-admin --version` in the same venv.

    .venv/bin/python bench/cli_start.py               # 7 rounds
    .venv/bin/python bench/cli_start.py --rounds 15
    .venv/bin/python bench/cli_start.py --imports     # also: the heavy libraries each loads

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
then every round runs each command once, in turn, so outside load hits all of them alike.
It prints the median wall time of each (lowest and highest round beside it) and its ratio to
the baseline's median.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

# What `--imports` looks for: libraries the command line should not need to load.
HEAVY = ("openai", "opentelemetry", "ninja", "pydantic", "prometheus_client", "httpx", "redis")

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


def environments(var_dir: Path) -> dict[str, dict[str, str]]:
    env = _common.child_env(f"sqlite:///{var_dir / 'bench.sqlite3'}", var_dir)
    bare = {k: v for k, v in env.items() if k != "DJANGO_SETTINGS_MODULE"}
    return {name: bare if COMMANDS[name] is None else env for name in COMMANDS}


def run_once(name: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv(name), cwd=_common.ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def heavy_imports(name: str, env: dict[str, str]) -> list[str]:
    """The HEAVY libraries the command imported, from `python -X importtime`."""
    args = argv(name)
    found = subprocess.run(
        [args[0], "-X", "importtime", *args[1:]],
        cwd=_common.ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ).stderr
    loaded = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in found.splitlines()}
    return [lib for lib in HEAVY if lib in loaded]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--imports", action="store_true", help="list the heavy libraries too")
    options = parser.parse_args()

    var_dir = _common.scratch_dir("resumer-clibench-")
    envs = environments(var_dir)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
        cwd=_common.ROOT,
        env=envs["manage.py --help"],
        check=True,
    )
    for name in COMMANDS:  # caches warm, not measured
        run_once(name, envs[name])
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(options.rounds):
        for name in COMMANDS:
            samples[name].append(run_once(name, envs[name]))

    base = statistics.median(samples[BASELINE])
    print(f"\nwall time of a new process, median of {options.rounds} rounds, DEBUG off")
    print(f"{'command':44} {'median ms':>10} {'(low-high)':>14} {'× baseline':>10}")
    for name, times in samples.items():
        med = statistics.median(times)
        spread = f"({min(times) * 1000:.0f}-{max(times) * 1000:.0f})"
        print(f"{name:44} {med * 1000:10.0f} {spread:>14} {med / base:9.2f}×")
    if options.imports:
        print(f"\nof {', '.join(HEAVY)}, what each command imports:")
        for name in COMMANDS:
            print(f"{name:44} {', '.join(heavy_imports(name, envs[name])) or '-'}")
    shutil.rmtree(var_dir, ignore_errors=True)


if __name__ == "__main__":
    main()

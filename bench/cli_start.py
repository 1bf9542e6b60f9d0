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


def environments(var_dir: Path) -> dict[str, dict[str, str]]:
    env = _common.child_env(f"sqlite:///{var_dir / 'bench.sqlite3'}", var_dir)
    bare = {k: v for k, v in env.items() if k != "DJANGO_SETTINGS_MODULE"}
    return {name: bare if COMMANDS[name] is None else env for name in COMMANDS}


def run_once(name: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv(name), cwd=_common.ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def heavy_imports(name: str, env: dict[str, str], var_dir: Path) -> list[str]:
    """The HEAVY libraries the command imported."""
    written = var_dir / "modules.json"
    python, *args = argv(name)
    subprocess.run(
        [python, "-c", PROBE, str(written), *args],
        cwd=_common.ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    loaded = json.loads(written.read_text())
    return [lib for lib in HEAVY if any(m == lib or m.startswith(lib + ".") for m in loaded)]


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
            print(f"{name:44} {', '.join(heavy_imports(name, envs[name], var_dir)) or '-'}")
    shutil.rmtree(var_dir, ignore_errors=True)


if __name__ == "__main__":
    main()

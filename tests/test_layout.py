"""The house rules of runs/ (issue 22), checked on the code itself: a module a reader can
hold in their head, functions that fit a screen, and imports at the top of the module, where
they show which way the packages depend on each other."""

from __future__ import annotations

import ast
from pathlib import Path

RUNS = Path(__file__).resolve().parent.parent / "runs"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
# Read as one: models.py holds the one-row rules the admin and the migrations read together;
# replay.decide is the decision table, a branch per row of the protocol's table.
LONG_MODULES = {"models.py"}
LONG_FUNCTIONS = {("planning/replay.py", "decide")}
# RunsConfig.ready imports what it connects and registers: the apps must be loaded first.
# A heavy library only some code paths use is imported where it is used, so that a command
# line's start does not pay for it (bench/cli_start.py): the model SDK at a model tool's first
# call, the OTLP exporter when tracing is on, psycopg's loader on PostgreSQL only.
LATE_IMPORTS = {
    ("apps.py", "ready"),
    ("tools/model.py", "sdk"),
    ("tracing.py", "_exporter_from_environment"),
    ("ledger/sql/driver.py", "__init__"),
}


def _modules() -> list[tuple[str, ast.Module, int]]:
    found = []
    for path in sorted(RUNS.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        text = path.read_text()
        found.append((path.relative_to(RUNS).as_posix(), ast.parse(text), text.count("\n")))
    return found


def _functions(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def test_no_module_in_runs_is_longer_than_a_reader_holds():
    long = [
        f"{name}: {lines}"
        for name, _, lines in _modules()
        if lines > MAX_MODULE_LINES and name not in LONG_MODULES
    ]
    assert long == []


def test_no_function_in_runs_is_longer_than_a_screen():
    long = [
        f"{name}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for name, tree, _ in _modules()
        for fn in _functions(tree)
        if fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES
        and (name, fn.name) not in LONG_FUNCTIONS
    ]
    assert long == []


def test_runs_imports_at_the_top_of_its_modules():
    late = [
        f"{name}:{node.lineno} in {fn.name}"
        for name, tree, _ in _modules()
        for fn in _functions(tree)
        if (name, fn.name) not in LATE_IMPORTS
        for node in ast.walk(fn)
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    assert late == []

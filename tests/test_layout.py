"""The house rules of runs/ (issues 22 and 43), checked on the code itself: a module a reader
can hold in their head, functions that fit a screen, imports at the top of the module, where
they show which way the packages depend on each other, and only where each package's
docstring says they may go; a fact kept in its one place; no comment sending a reader to a
module that moved."""

from __future__ import annotations

import ast
import re
from pathlib import Path

RUNS = Path(__file__).resolve().parent.parent / "runs"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
# Read as one: models.py holds the one-row rules the admin and the migrations read together,
# events.py the protocol's vocabulary (a class per event type, and its one reader); replay.decide
# is the decision table, a branch per row of the protocol's table.
LONG_MODULES = {"models.py", "events.py"}
LONG_FUNCTIONS = {("planning/replay.py", "decide")}
# RunsConfig.ready imports what it connects and registers: the apps must be loaded first.
# A heavy library only some code paths use is imported where it is used, so that a command
# line's start does not pay for it (bench/cli_start.py): the model SDK at a model tool's first
# call, the model price table at the first price, the OTLP exporter when tracing is on,
# psycopg's loader on PostgreSQL only.
LATE_IMPORTS = {
    ("apps.py", "ready"),
    ("tools/model.py", "sdk"),
    ("tools/model.py", "price_table"),
    ("gates/arguments.py", "_pydantic"),
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


# --- Who may import whom ---------------------------------------------------------------------
# Each package's __init__.py (and a bottom module's own docstring) states what it may import
# of runs, in one sentence: "May import: ledger, models (why), pipeline and ids; never …"
# (or "May import: nothing of runs."). Its modules' imports are held to that sentence; within
# the package everything is free.

MAY_IMPORT = re.compile(r"May import:\s*(.*?)(?:;|\.\s|\.$)", re.S)


def _without_asides(text: str) -> str:
    while "(" in text:
        text = re.sub(r"\([^()]*\)", "", text)
    return text


def _exists(dotted: str) -> bool:
    path = RUNS.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def stated_rule(docstring: str) -> frozenset[str] | None:
    """The modules of runs a docstring says its code may import (dotted, below runs), or None
    where it states no rule."""
    match = MAY_IMPORT.search(docstring)
    if match is None:
        return None
    said = " ".join(_without_asides(match.group(1)).split())
    if said.startswith("nothing"):
        return frozenset()
    return frozenset(item.strip() for item in re.split(r",|\band\b", said) if item.strip())


def _rules() -> dict[str, frozenset[str]]:
    """Where each rule holds ("ledger" for runs/ledger/, "ids" for runs/ids.py), and what it
    allows."""
    rules = {}
    for path in sorted(RUNS.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        owner = path.parent if path.name == "__init__.py" else path.with_suffix("")
        rule = stated_rule(ast.get_docstring(ast.parse(path.read_text())) or "")
        if rule is not None:
            rules[".".join(owner.relative_to(RUNS).parts)] = rule
    return rules


def _target(name: str) -> str:
    """The module of runs an imported name is (below runs): the longest prefix that exists."""
    parts = name.split(".")[1:]
    while parts and not _exists(".".join(parts)):
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [(node.lineno, _target(n)) for n in names if n.split(".")[0] == "runs"]
    return found


def _within(module: str, place: str) -> bool:
    return module == place or module.startswith(place + ".")


def test_every_import_rule_names_modules_that_exist():
    unknown = [
        f"{place}: {item}" for place, rule in _rules().items() for item in rule if not _exists(item)
    ]
    assert unknown == []


def test_every_module_imports_only_what_its_package_says_it_may():
    rules = _rules()
    broken = []
    for name, tree, _ in _modules():
        module = name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        governing = [place for place in rules if _within(module, place)]
        if not governing:
            continue
        place = max(governing, key=len)
        for line, target in _imports(tree):
            if _within(target, place) or any(_within(target, item) for item in rules[place]):
                continue
            broken.append(f"{name}:{line} imports runs.{target} ({place} may not)")
    assert broken == []


def test_the_import_rules_make_no_circle():
    rules = _rules()

    def reached(place: str, seen: set[str]) -> set[str]:
        for item in rules.get(place, ()):
            owner = next((p for p in rules if _within(item, p)), item)
            if owner not in seen:
                seen.add(owner)
                reached(owner, seen)
        return seen

    circles = [place for place in rules if place in reached(place, set())]
    assert circles == []


def test_a_rule_sentence_is_read_with_its_asides_and_its_nevers_left_out():
    rule = stated_rule(
        "Owns things.\n\nMay import: ledger, gates (the decision, and more), models\n"
        "and execution.engine (start_run); never the dashboard.\n"
    )
    assert rule == {"ledger", "gates", "models", "execution.engine"}
    assert stated_rule("May import: nothing of runs.") == frozenset()
    assert stated_rule("No rule here.") is None


# The agent SDKs are optional (requirements-agents.txt): the core runs without them, so only
# their adapters under runs/integrations/ import them.
AGENT_SDKS = {
    "agents",
    "langchain",
    "langchain_core",
    "langchain_openai",
    "langgraph",
    "pydantic_ai",
}


def test_only_the_integrations_import_an_agent_sdk():
    found = [
        f"{name}:{node.lineno}"
        for name, tree, _ in _modules()
        if not name.startswith("integrations/")
        for node in ast.walk(tree)
        for module in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level == 0
            else []
        )
        if module.split(".")[0] in AGENT_SDKS
    ]
    assert found == []


# --- One fact, one place -------------------------------------------------------------------


def _strings(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def _places(found) -> set[str]:
    return {name for name, tree, _ in _modules() if any(found(tree))}


def test_a_persons_actor_string_is_spelled_by_ids_alone():
    # Every face records a person as ids.user_actor() says; a face spelling it would drift.
    assert _places(lambda tree: ("user:" in text for text in _strings(tree))) == {"ids.py"}


def test_a_primary_keys_digits_are_written_by_ids_alone():
    # URLs, forms and query strings read a key through ids.DIGITS and ids.parse_pk.
    pattern = re.compile(r"(0-9\]|\\d)\{1,")
    assert _places(lambda tree: (pattern.search(text) for text in _strings(tree))) == {"ids.py"}


def test_the_lease_ttl_is_read_by_the_leases_alone():
    # How often a lease is renewed, and when a worker counts as silent, follow from it:
    # leases.renewal_interval() says both.
    def reads_ttl(tree: ast.Module):
        return (
            isinstance(node, ast.Attribute) and node.attr == "RESUMER_LEASE_TTL"
            for node in ast.walk(tree)
        )

    assert _places(reads_ttl) == {"ledger/leases.py"}


def test_every_module_path_the_code_names_exists():
    # Comments, docstrings and messages send a reader to a module by its path; one that moved
    # is a dead end.
    root = RUNS.parent
    path = re.compile(r"(?<![\w/.])runs/[\w/]+\.py\b")
    missing = [
        f"{source.relative_to(root)}: {named}"
        for folder in ("runs", "bench", "resumer", "demo")
        for source in sorted((root / folder).rglob("*.py"))
        if "migrations" not in source.parts
        for named in path.findall(source.read_text())
        if not (root / named).exists()
    ]
    assert missing == []

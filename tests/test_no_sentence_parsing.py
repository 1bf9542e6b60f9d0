"""Sentences are for people, never data (issue 43): no regular expression in runs/ looks for
words in a sentence, the way the inbox once matched the demo's "did not answer in time" and
the run page the planner's "already made … as …". What a page needs is a field of the event
or of the plan. Checked on the code itself: every `re` call's pattern in runs/ (outside
migrations) is read with Python's own regex parser, and none may spell two words in a row."""

from __future__ import annotations

import ast
import re
import re._parser as sre
from pathlib import Path

RUNS = Path(__file__).resolve().parent.parent / "runs"
RE_CALLS = {
    "compile",
    "search",
    "match",
    "fullmatch",
    "findall",
    "finditer",
    "sub",
    "subn",
    "split",
}
# Two words with only spaces between them: wording, not a format.
WORDS = re.compile(r"[A-Za-z]{2,} +[A-Za-z]{2,}")
# Where a pattern's JSON-like or f-string part is not known before run time.
UNKNOWN = "\x00"
# The patterns the inbox and the run page used before their fields existed.
RETIRED = {
    "TIMED_OUT": r"timed? ?out|timeout|in time\b",
    "MADE_AGAIN": r"already made (?P<tool>[\w.-]+) \((?P<call>[^)]*)\) as (?P<made>\S+);",
}


def _spelled(items: list) -> list[str]:
    """The runs of text a parsed pattern spells: literal characters, a space for a whitespace
    class, an optional or repeated character once; anything else breaks the run. Each group
    and each alternative is spelled on its own."""
    runs, text = [], ""
    for op, av in items:
        if op is sre.LITERAL:
            text += chr(av)
        elif op is sre.IN and av == [(sre.CATEGORY, sre.CATEGORY_SPACE)]:
            text += " "
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and len(av[2]) == 1:
            inner = _spelled(list(av[2]))
            text += inner[0] if len(inner) == 1 and UNKNOWN not in inner[0] else UNKNOWN
            runs += inner if len(inner) > 1 else []
        elif op is sre.SUBPATTERN:
            text += UNKNOWN
            runs += _spelled(list(av[-1]))
        elif op is sre.BRANCH:
            text += UNKNOWN
            for branch in av[1]:
                runs += _spelled(list(branch))
        elif op is sre.AT:
            continue  # an anchor or a word boundary matches no character
        else:
            text += UNKNOWN
    return [*runs, text]


def reads_words(pattern: str) -> bool:
    """Whether a regular expression looks for wording: two words in a row."""
    return any(WORDS.search(text) for text in _spelled(list(sre.parse(pattern))))


def _pattern_text(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):  # rf"^{PREFIX}…": the known parts, the rest unknown
        return "".join(
            part.value if isinstance(part, ast.Constant) else UNKNOWN for part in node.values
        )
    return None


def _re_calls() -> list[tuple[str, int, str | None]]:
    found = []
    for path in sorted(RUNS.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "re"
                and node.func.attr in RE_CALLS
                and node.args
            ):
                name = path.relative_to(RUNS).as_posix()
                found.append((name, node.lineno, _pattern_text(node.args[0])))
    return found


def test_no_regular_expression_in_runs_looks_for_words_of_a_sentence():
    calls = _re_calls()

    assert calls, "the check found no regular expression in runs/ at all"
    assert [f"{name}:{line}" for name, line, text in calls if text is None] == []
    wording = [f"{name}:{line} {text!r}" for name, line, text in calls if reads_words(text or "")]
    assert wording == []


def test_runs_uses_the_re_module_only_by_its_name():
    # `from re import search` or `import re as x` would hide a call from the check above.
    hidden = []
    for path in sorted(RUNS.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "re":
                hidden.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.Import):
                hidden += [
                    f"{path.name}:{node.lineno}" for a in node.names if a.name == "re" and a.asname
                ]
    assert hidden == []


def test_the_check_finds_the_sentence_patterns_the_fields_replaced():
    assert {name for name, pattern in RETIRED.items() if reads_words(pattern)} == set(RETIRED)
    assert reads_words(r"already\s+made (\S+)")
    assert not reads_words(r"^artifact://(?P<name>[A-Za-z0-9_./-]+)/v(?P<version>\d+)$")
    assert not reads_words(r"^[0-9a-f]{64}$")

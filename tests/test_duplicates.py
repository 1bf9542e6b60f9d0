"""Issue 43: `duplicates` over runs/ finds no pair outside the migrations that is not
boilerplate. The pairs it finds are either folded or listed, each with why it stays, in
docs/duplicates.md; this runs the tool (where it is installed: it is a developer's command,
not a dependency) and fails on a pair between two files the page does not list, or on more
pairs between two files than it lists."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "duplicates.md"


def _pair(left: str, right: str) -> tuple[str, str]:
    """Two places (`file:lines`) as the files they are in, in a fixed order."""
    files = sorted(place.rsplit(":", 1)[0] for place in (left, right))
    return files[0], files[1]


def _listed() -> Counter:
    """The pairs docs/duplicates.md lists: each `a:lines ↔ b:lines` in backticks."""
    text = " ".join(PAGE.read_text().split())
    spans = text.split("`")[1::2]
    return Counter(_pair(*span.split(" ↔ ")) for span in spans if span.count(" ↔ ") == 1)


def _found(output: str) -> Counter:
    """The tool's rows (`D1 a:lines ~ b:lines …`), less those inside the migrations."""
    found = Counter()
    for line in output.splitlines():
        words = line.split()
        if len(words) < 4 or not words[0].startswith("D") or words[2] != "~":
            continue
        pair = _pair(words[1], words[3])
        if not all(f.startswith("migrations/") for f in pair):
            found[pair] += 1
    return found


def test_the_page_lists_pairs_the_way_the_test_reads_them():
    listed = _listed()
    assert listed[("execution/asking.py", "pipeline.py")] == 1
    assert sum(listed.values()) >= 30


def test_every_pair_duplicates_finds_in_runs_is_folded_or_listed_with_its_reason():
    tool = shutil.which("duplicates")
    if tool is None:
        pytest.skip("the duplicates command is not installed on this machine")
    done = subprocess.run(
        [tool, "--repo", str(ROOT / "runs"), "--most", "200", "--seconds", "120"],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    assert "incomplete:" not in done.stdout, done.stdout
    assert "files read" in done.stdout.splitlines()[0]
    listed = _listed()
    unlisted = {pair: n for pair, n in _found(done.stdout).items() if n > listed[pair]}
    assert unlisted == {}

"""The README is the front door: what Resumer is, the quick start, configuration, commands and
links. Long material lives in docs/, so a newcomer reaches `make run` without reading past it."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
MAX_LINES = 250


def test_the_readme_is_shorter_than_250_lines():
    lines = README.read_text().count("\n")
    assert lines < MAX_LINES, f"README.md has {lines} lines; move long sections to docs/"


def test_the_quick_start_is_make_run_and_make_test():
    text = README.read_text()
    section = re.search(r"^## Quick start\n(.*?)^## ", text, re.S | re.M)
    assert section, "README.md has no '## Quick start' section"
    block = re.search(r"```sh\n(.*?)```", section.group(1), re.S)
    assert block and block.group(1).split("\n") == ["make run", "make test", ""]

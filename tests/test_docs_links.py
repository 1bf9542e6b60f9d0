"""The README and docs/ send readers to each other and to the code; a link to a page that moved
or a heading that was renamed is a dead end a newcomer meets first. Every relative link in
README.md and docs/*.md must name a file that exists and, with a #fragment, a heading of that
file, as GitHub makes its anchors."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _prose(path: Path) -> list[str]:
    """The page's lines outside fenced code blocks, where a `#` is a comment, not a heading."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercased, punctuation dropped but `-` and `_`, spaces
    made hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in _prose(path):
        match = HEADING.match(line)
        if not match:
            continue
        slug = _slug(match.group(1))
        # A repeated heading gets -1, -2, … on GitHub.
        n, candidate = 0, slug
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


def _broken(page: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for line in _prose(page):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, fragment = target.partition("#")
            linked = (page.parent / file_part).resolve() if file_part else page
            where = f"{page.relative_to(root)}: ({target})"
            if not linked.exists():
                broken.append(f"{where} names no file")
            elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                broken.append(f"{where} names no heading of {linked.relative_to(root)}")
    return broken


def test_every_relative_link_in_the_readme_and_docs_reaches_its_file_and_heading():
    broken = [problem for page in PAGES for problem in _broken(page)]
    assert broken == [], "\n".join(broken)


def test_anchors_are_the_ones_github_makes_for_headings_with_code_and_punctuation():
    architecture = anchors(ROOT / "docs" / "architecture.md")
    deploy = anchors(ROOT / "docs" / "deploy.md")
    assert "what-verify_chain-proves-and-what-it-does-not" in architecture
    assert "after-a-database-crash-in-order" in deploy
    # A `#` comment inside a fenced shell block is no heading.
    assert "etcresumerenv--the-same-file-on-every-machine" not in deploy


def test_a_link_to_a_missing_file_or_heading_is_reported(tmp_path):
    page = tmp_path / "page.md"
    (page.parent / "other.md").write_text("# Other\n")
    page.write_text(
        "# Title\n\nSee [a](#nowhere), [b](#title), [c](other.md#other) and [d](gone.md).\n"
    )
    assert _broken(page, root=tmp_path) == [
        "page.md: (#nowhere) names no heading of page.md",
        "page.md: (gone.md) names no file",
    ]

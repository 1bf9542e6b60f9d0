"""A run's public id, "run-<pk>": the one place it is formatted and parsed (pages, forms, the
admin's search, commands, messages). At most 18 digits, so any id that parses is inside a
64-bit primary key: a huge number is "no such run", never a database overflow error."""

from __future__ import annotations

import re

PREFIX = "run-"
DIGITS = r"[0-9]{1,18}"
# For URL converters: the public id as it appears in a path.
URL_REGEX = rf"{PREFIX}{DIGITS}"
_PUBLIC = re.compile(rf"^{PREFIX}({DIGITS})$")
_PUBLIC_OR_BARE = re.compile(rf"^(?:{PREFIX})?({DIGITS})$")


def run_id(pk: int) -> str:
    return f"{PREFIX}{pk}"


def parse_run_id(value: str | None, *, bare: bool = False) -> int | None:
    """The pk in "run-12" (or, with `bare`, also in "12" as a person may type it); None for
    anything else."""
    match = (_PUBLIC_OR_BARE if bare else _PUBLIC).match((value or "").strip())
    return int(match.group(1)) if match else None

"""A run's public id, "run-<pk>": the one place it is formatted and parsed (pages, forms, the
admin's search, commands, messages). At most 18 digits, so any id that parses is inside a
64-bit primary key: a huge number is "no such run", never a database overflow error. Any
other primary key a URL, a form or a query string carries is read here too (`DIGITS`,
`parse_pk`).

Also the names events and leases record: a person, "user:<username>", whichever face they
acted through (a page, the API, the admin, a command); a worker process,
"worker:<hostname>:<pid>", which the engine takes leases with and the workers page matches to
RQ's own record of the process.

May import: nothing of runs."""

from __future__ import annotations

import re
from typing import Protocol

PREFIX = "run-"
# The longest primary key a URL, a form or a query string carries: inside any 64-bit column.
MAX_DIGITS = 18
# For URL converters: a primary key as it appears in a path.
DIGITS = rf"[0-9]{{1,{MAX_DIGITS}}}"
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


def parse_pk(value: str | None) -> int | None:
    """A primary key as a person or a link sends it ("42"): ASCII digits, at most MAX_DIGITS
    of them; None for anything else (another script's digits, a sign, zero, a huge number)."""
    value = (value or "").strip()
    if not (value.isascii() and value.isdigit() and len(value) <= MAX_DIGITS):
        return None
    pk = int(value)
    return pk if pk >= 1 else None


USER_PREFIX = "user:"


class Named(Protocol):
    def get_username(self) -> str: ...


def user_actor(who: str | Named) -> str:
    """Who an event records for a person: a signed-in user, or the name a command was given."""
    return f"{USER_PREFIX}{who if isinstance(who, str) else who.get_username()}"


WORKER_PREFIX = "worker:"


def worker_holder(hostname: str, pid: int) -> str:
    return f"{WORKER_PREFIX}{hostname}:{pid}"

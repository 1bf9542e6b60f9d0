"""The one JSON form the ledger hashes and stores: keys sorted, no spaces, anything else as
its str(). chain.py fingerprints with it, the vendor SQL stores JSON columns in it; it imports
nothing of Resumer, so both can."""

from __future__ import annotations

import json
from typing import Any

# One encoder for every call: json.dumps() with these options builds a new one each time, and
# the append path encodes four values per event. encode() keeps no state between calls.
CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def canonical_json(value: Any) -> str:
    return CANONICAL.encode(value)


def as_recorded(value: Any) -> Any:
    """A value as the ledger records it, and as a stage is handed it, first time or replayed:
    JSON, keys sorted. A JSON column hands a result back in its own key order (PostgreSQL's
    jsonb sorts keys its way), so a stage that put a result in a prompt would ask another
    request when it runs again; handed the same form both times, it asks the same."""
    if type(value) is dict and all(
        type(key) is str and type(item) in _PLAIN for key, item in value.items()
    ):
        # A flat object of strings, integers, booleans and nulls (a typical tool's result)
        # comes back from the round trip as itself with its keys sorted: sorted here, with no
        # text made and read again on every call's return.
        return {key: value[key] for key in sorted(value)}
    return json.loads(canonical_json(value))


# The JSON types a round trip hands back as they were (a float's text may not be its repr).
_PLAIN = frozenset((str, int, bool, type(None)))

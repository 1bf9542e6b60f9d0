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

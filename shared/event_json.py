"""The JSON text of an event, as the streams store it and SSE frames carry it: one compact encoding for both.

A stream adapter stores ``dumps(event)`` and hands the text back with what it reads (``StreamEntry.json``), so a
frame of an entry read from a stream is written without encoding the event again.
"""

from __future__ import annotations

import json
from typing import Any


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept as is (what the streams store and SSE frames carry)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

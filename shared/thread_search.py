"""Which of a user's threads a listing or a search returns, and the walk over their list, newest first.

Both stores walk the same ordered list (DynamoDB: the user's partition of the thread-list index, ``GSI3``; the fake:
its threads sorted the same way) in batches, and both filter here, in Python, on what a list entry carries (title,
metadata, flags, preview). On DynamoDB that is what a ``FilterExpression`` would do at the same cost (a filter is
applied after the read, and billed as read), but a case-insensitive match is not something a ``FilterExpression``
can say. The cost is bounded by ``MAX_EXAMINED`` entries a call: a call that examined that many returns what it
found (perhaps fewer than ``limit``, perhaps none) and a cursor, as DynamoDB's own filtered Query does.

The listing (``LISTING``) returns unarchived threads, pinned ones first: two passes over the list (``pinned``, then
``rest``), the cursor saying which pass and where. Full-text search over messages is not this: see
docs/storage.md "The thread list".
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from shared.errors import InvalidRequest
from shared.models import Thread
from shared.thread_fields import Scalar

BATCH = 100
"""Entries read per request (one Query page of the index: ~100 entries of ~200 bytes, 5 KB, 1 to 3 read units)."""
MAX_EXAMINED = 1000
"""Entries examined at most per call: the bound of a call's cost (about 25 read units on DynamoDB)."""

Phase = Literal["all", "pinned", "rest"]
Fetch = Callable[[str | None, int], Awaitable[tuple[list[tuple[str, Thread]], bool]]]
"""``fetch(before, n)``: up to ``n`` entries (sort key, thread) below the sort key ``before`` (all when None), newest
first, and whether there may be more."""


@dataclass(frozen=True)
class ThreadCriteria:
    """What a listing or search keeps: ``query`` (case-insensitive: within the title, or every word the start of a
    word of the preview), ``metadata`` (exact match on every given key), ``archived`` / ``pinned`` (None: either);
    ``pinned_first``: pinned threads before the others (each part newest first)."""

    query: str | None = None
    metadata: dict[str, Scalar] = field(default_factory=dict)
    archived: bool | None = None
    pinned: bool | None = None
    pinned_first: bool = False

    def matches(self, thread: Thread) -> bool:
        if self.archived is not None and thread.archived != self.archived:
            return False
        if self.pinned is not None and thread.pinned != self.pinned:
            return False
        if not all(_same(thread.metadata, key, value) for key, value in self.metadata.items()):
            return False
        return self.query is None or text_matches(self.query, thread)

    @property
    def phases(self) -> tuple[Phase, ...]:
        return ("pinned", "rest") if self.pinned_first else ("all",)


def _same(metadata: dict[str, Scalar], key: str, value: Scalar) -> bool:
    """``metadata[key]`` is ``value`` (a boolean never equals a number, as in JSON)."""
    if key not in metadata:
        return False
    held = metadata[key]
    return held == value and isinstance(held, bool) == isinstance(value, bool)


LISTING = ThreadCriteria(archived=False, pinned_first=True)
"""``GET /api/v1/threads``: unarchived, pinned first, then the most recent."""


def text_matches(query: str, thread: Thread) -> bool:
    """``query`` within the title (case-insensitive), or each of its words the start of a word of the preview."""
    needle = query.casefold().strip()
    if not needle:
        return True
    if thread.title and needle in thread.title.casefold():
        return True
    words = thread.last_message.preview.casefold().split() if thread.last_message else []
    return all(any(word.startswith(part) for word in words) for part in needle.split())


@dataclass(frozen=True)
class Position:
    """Where a walk goes on: in which pass, below which sort key (None: from the newest)."""

    phase: Phase
    before: str | None = None


def _in_phase(phase: Phase, thread: Thread) -> bool:
    return phase == "all" or thread.pinned == (phase == "pinned")


def _batch_size(criteria: ThreadCriteria, phase: Phase, wanted: int) -> int:
    """Entries to read next: when nearly every entry matches (the listing's second pass, a search on flags only),
    just what is still wanted (and one more, to know whether there are more); else a full batch."""
    selective = phase == "pinned" or criteria.query or criteria.metadata or criteria.pinned or criteria.archived
    return BATCH if selective else min(BATCH, wanted + 1)


async def walk(
    fetch: Fetch, criteria: ThreadCriteria, *, limit: int, start: Position | None
) -> tuple[list[Thread], Position | None]:
    """Up to ``limit`` threads matching ``criteria`` from ``start`` on, and where the next page starts (None: the
    end). Examines at most ``MAX_EXAMINED`` entries (see the module's docstring)."""
    phases = criteria.phases
    position = start or Position(phases[0])
    found: list[Thread] = []
    examined = 0
    while True:
        batch, more = await fetch(position.before, _batch_size(criteria, position.phase, limit - len(found)))
        for sort_key, thread in batch:
            examined += 1
            position = Position(position.phase, sort_key)
            if _in_phase(position.phase, thread) and criteria.matches(thread):
                found.append(thread)
                if len(found) == limit:
                    return found, position
        if not more or not batch:
            later = phases[phases.index(position.phase) + 1 :]
            if not later:
                return found, None
            position = Position(later[0])
        if examined >= MAX_EXAMINED:
            return found, position


def encode_cursor(partition: str, position: Position) -> str:
    """An opaque cursor bound to the caller's partition (the store's name for their thread list)."""
    value = {"p": partition, "phase": position.phase, "before": position.before}
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()


def decode_cursor(cursor: str, partition: str, criteria: ThreadCriteria) -> Position:
    """The position a cursor continues from: exactly the expected fields, in the caller's own partition, in a pass
    of ``criteria`` (a search's cursor does not continue a listing); ``invalid_cursor`` (422) otherwise."""
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest("malformed cursor", code="invalid_cursor") from exc
    if (
        isinstance(value, dict)
        and set(value) == {"p", "phase", "before"}
        and value["p"] == partition
        and value["phase"] in criteria.phases
        and (value["before"] is None or isinstance(value["before"], str))
    ):
        return Position(value["phase"], value["before"])
    raise InvalidRequest("malformed cursor", code="invalid_cursor")

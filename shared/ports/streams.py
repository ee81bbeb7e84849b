"""The event stream ports: append-only streams keyed by run or thread, which SSE readers tail (Redis streams).

Fake: ``InMemoryEventStream`` (shared/adapters/in_memory/stream.py); adapter: ``RedisEventStream``
(shared/adapters/redis_stream.py; the suite runs it on a redis-server, in cluster mode and on fakeredis);
contract: tests/contract/test_event_stream_contract.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One event in a run's or thread's stream; ``id`` is the stream entry id (the SSE ``id:``)."""

    id: str
    event: dict[str, Any]
    json: str | None = None
    """The event's JSON text as stored (``event`` decoded from it), written into SSE frames as it is."""


class EventStream(Protocol):
    """Append-only event streams keyed by run or thread.

    Fake: ``InMemoryEventStream``; adapter: ``RedisEventStream``; contract:
    tests/contract/test_event_stream_contract.py."""

    async def append(self, key: str, event: dict[str, Any]) -> str:
        """Append one event; returns its stream entry id."""
        ...

    async def read_after(self, key: str, after_id: str, *, block_ms: int, count: int = 100) -> list[StreamEntry]:
        """Entries strictly after ``after_id`` (``"0-0"`` for all), waiting up to ``block_ms`` for the first."""
        ...

    async def expire(self, key: str, seconds: int) -> None: ...


@runtime_checkable
class BatchEventStream(Protocol):
    """An event stream that appends many events in one round trip (Redis: a pipeline).

    Fake: ``InMemoryEventStream``; adapter: ``RedisEventStream``; contract:
    tests/contract/test_event_stream_contract.py."""

    async def append_batch(
        self,
        entries: Sequence[tuple[str, dict[str, Any]]],
        *,
        clear: str | None = None,
        encoded: Sequence[str] | None = None,
    ) -> list[str]:
        """Append ``(key, event)`` pairs in order, after deleting the key ``clear`` when given; their entry ids.
        ``encoded``: each event's JSON text, already encoded by the caller (stored as it is, not encoded again).
        On an exception none counts as written (as with one append that fails, some may be there: a retry can
        repeat them)."""
        ...


@runtime_checkable
class RetainedStream(Protocol):
    """An event stream that can say where a key's retained entries begin: what a trimmed or expired stream no
    longer holds is read from the store instead (a thread follower's catch-up).

    Fake: ``InMemoryEventStream``; adapter: ``RedisEventStream``; contract:
    tests/contract/test_event_stream_contract.py."""

    async def oldest_id(self, key: str) -> str | None:
        """The id of the oldest entry the stream still holds; None when the key holds nothing (expired, never
        written, or deleted)."""
        ...


@runtime_checkable
class ProbedStream(Protocol):
    """An event stream that can say whether it is reachable (Redis ``PING``): admission's probe.

    Fake: ``InMemoryEventStream``; adapter: ``RedisEventStream``; contract:
    tests/contract/test_event_stream_contract.py."""

    async def ping(self) -> bool: ...

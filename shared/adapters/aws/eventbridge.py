"""EventBridge adapter for the :class:`~shared.memory.ports.EventPublisher` port (``events.put_events``).

``put_events`` does not raise when entries fail: it returns ``FailedEntryCount`` and an ``ErrorCode`` per failed
entry, in the order of the request. This adapter turns that into a list of failures; retrying is the caller's
business (:class:`~shared.memory.trigger.RunCompletedPublisher`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from shared.memory.models import BusEvent, PublishFailure

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient

MAX_ENTRIES_PER_CALL = 10


class EventBridgePublisher:
    def __init__(self, bus_name: str, client_factory: Callable[[], EventBridgeClient]) -> None:
        self._bus = bus_name
        self._client_factory = client_factory
        self._client: EventBridgeClient | None = None

    @property
    def client(self) -> EventBridgeClient:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    async def publish(self, events: Sequence[BusEvent]) -> list[PublishFailure]:
        failures: list[PublishFailure] = []
        for start in range(0, len(events), MAX_ENTRIES_PER_CALL):
            chunk = events[start : start + MAX_ENTRIES_PER_CALL]
            entries: list[Any] = [
                {
                    "Source": e.source,
                    "DetailType": e.detail_type,
                    "Detail": e.detail_json(),
                    "EventBusName": self._bus,
                }
                for e in chunk
            ]
            resp = await asyncio.to_thread(lambda entries=entries: self.client.put_events(Entries=entries))  # type: ignore[misc]
            if not resp.get("FailedEntryCount"):
                continue
            for offset, result in enumerate(resp.get("Entries", [])):
                if result.get("ErrorCode") or not result.get("EventId"):
                    failures.append(
                        PublishFailure(
                            start + offset,
                            result.get("ErrorCode", "Unknown"),
                            result.get("ErrorMessage", "")[:300],
                        )
                    )
        return failures

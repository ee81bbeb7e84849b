"""The in-memory reference fake of the ``EventPublisher`` port: the bus is a list of the accepted events.

``reject`` names detail types the fake bus refuses entry by entry (as ``put_events`` reports failed entries
without raising), so callers' retry paths can be exercised; tests/contract/test_event_publisher_contract.py runs
the accepted-entry cases on this fake and on the EventBridge adapter (moto).
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.memory.models import BusEvent, PublishFailure


class InMemoryEventPublisher:
    def __init__(self, *, reject: frozenset[str] = frozenset()) -> None:
        self.published: list[BusEvent] = []
        self._reject = reject

    async def publish(self, events: Sequence[BusEvent]) -> list[PublishFailure]:
        failures: list[PublishFailure] = []
        for index, event in enumerate(events):
            if event.detail_type in self._reject:
                failures.append(PublishFailure(index, "InternalFailure", "rejected by the fake bus"))
            else:
                self.published.append(event)
        return failures

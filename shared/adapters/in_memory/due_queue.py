"""The in-memory reference fake of the ``DueQueue`` port: delayed messages kept with the time they become visible.

Like the SQS adapter it clamps the delay to SQS's 0-900 seconds and hands the consumer the message it was given;
``receive(now)`` takes the messages visible at ``now``, as a poll of the queue would.
tests/contract/test_due_queue_contract.py runs the same cases on this fake and on ``SqsDueQueue`` (moto).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from shared.memory.coalescing import ExtractionDue
from shared.models import utc_now

MAX_DELAY_S = 900


class InMemoryDueQueue:
    def __init__(self) -> None:
        self.messages: list[tuple[datetime, ExtractionDue]] = []

    async def send(self, due: ExtractionDue, *, delay_s: int) -> None:
        delay = max(0, min(int(delay_s), MAX_DELAY_S))
        self.messages.append((utc_now() + timedelta(seconds=delay), due))

    def receive(self, now: datetime | None = None) -> list[ExtractionDue]:
        """Take the messages visible at ``now`` (default: the current time), oldest first."""
        at = now or utc_now()
        visible = [due for when, due in self.messages if when <= at]
        self.messages = [(when, due) for when, due in self.messages if when > at]
        return visible

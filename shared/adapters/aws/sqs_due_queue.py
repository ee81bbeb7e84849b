"""SQS adapter for :class:`~shared.memory.ports.DueQueue`: a delayed message on the memory queue.

``SendMessage`` with ``DelaySeconds`` (0-900) keeps the message invisible for the quiet period; the memory
function receives it like any other record of its queue. No timer, no background task: the send is the last
thing the invocation does before it returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from shared.memory.models import ExtractionDue

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

MAX_DELAY_S = 900


class SqsDueQueue:
    def __init__(self, queue_url: str, client_factory: Callable[[], SQSClient]) -> None:
        self._queue_url = queue_url
        self._client_factory = client_factory
        self._client: SQSClient | None = None
        self.sent = 0

    @property
    def client(self) -> SQSClient:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    async def send(self, due: ExtractionDue, *, delay_s: int) -> None:
        body = due.model_dump_json(by_alias=True)
        delay = max(0, min(int(delay_s), MAX_DELAY_S))
        _ = self.client
        await asyncio.to_thread(
            lambda: self.client.send_message(QueueUrl=self._queue_url, MessageBody=body, DelaySeconds=delay)
        )
        self.sent += 1

"""Exponential backoff for an SQS record that failed: its visibility timeout stretched to the next attempt's delay
(``ChangeMessageVisibility``), so the queue redelivers it then rather than after the queue's fixed timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class SqsBackoff:
    def __init__(self, client: Callable[[], Any], queue_url: str) -> None:
        self._make_client = client
        self._client: Any = None
        self._queue_url = queue_url

    async def delay(self, receipt_handle: str, seconds: int) -> None:
        if self._client is None:
            self._client = self._make_client()
        await asyncio.to_thread(
            self._client.change_message_visibility,
            QueueUrl=self._queue_url,
            ReceiptHandle=receipt_handle,
            VisibilityTimeout=seconds,
        )

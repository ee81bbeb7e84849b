"""The base of every DynamoDB adapter: one table, a client created lazily, calls run off the event loop.

boto3 is synchronous, so each call runs in a worker thread and the event loop keeps streaming. The client is
created on first use (cheap cold starts; moto can patch before it exists), on the event loop's thread, because
boto3's default session is not thread-safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

T = TypeVar("T")


class TableAdapter:
    def __init__(self, table_name: str, client_factory: Callable[[], DynamoDBClient]) -> None:
        self._table = table_name
        self._client_factory = client_factory
        self._client: DynamoDBClient | None = None
        self.request_count = 0
        """Requests sent to DynamoDB (benchmarks and the window's cost tests count them)."""

    @property
    def table_name(self) -> str:
        return self._table

    @property
    def client(self) -> DynamoDBClient:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    async def _call(self, fn: Callable[[], T]) -> T:
        self.request_count += 1
        _ = self.client
        return await asyncio.to_thread(fn)

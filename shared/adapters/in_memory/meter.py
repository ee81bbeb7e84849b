"""How the in-memory fakes stand in for the DynamoDB round trip: a count and a yield per request.

``request_count`` grows by the number of requests the DynamoDB adapter would send for the same call on an
uncontended table (the contract suites and the cost tests compare them); the yield lets concurrent tasks interleave
between calls, as they would. The fakes of one table share one meter (``InMemoryStore`` is theirs).
"""

from __future__ import annotations

import asyncio


class RequestMeter:
    """Counts requests; a subclass may override ``_request`` to add a round trip's latency (benchmarks do)."""

    def __init__(self) -> None:
        self.request_count = 0

    async def request(self) -> None:
        await self._request()

    async def _request(self) -> None:
        self.request_count += 1
        await asyncio.sleep(0)

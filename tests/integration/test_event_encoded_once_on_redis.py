"""The encode-once test of tests/unit/test_event_cost.py, on a real redis-server (the unit tier runs it on the
in-memory stream)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from shared.adapters.redis_stream import RedisEventStream, connect
from tests.unit.test_event_cost import (
    test_each_event_is_encoded_once_from_the_emitter_to_the_sse_frames_of_both_streams as test_encoded_once,
)

__all__ = ["test_encoded_once"]


@pytest.fixture
async def event_stream(redis_url: str) -> AsyncIterator[Any]:
    stream = RedisEventStream(connect(redis_url, cluster=False))
    yield stream
    await stream.close()

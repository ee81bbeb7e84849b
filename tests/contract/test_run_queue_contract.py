"""Contract of the run-queue port (the ``enqueue`` strategy): the same cases against the in-memory fake and
DynamoDB (moto)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared.adapters.aws.run_queue import DynamoDBRunQueue
from shared.adapters.in_memory.run_queue import InMemoryRunQueue
from shared.models import utc_now
from shared.ports.run_queue import QueuedRun

Queue = InMemoryRunQueue | DynamoDBRunQueue


@pytest.fixture(params=["memory", "dynamodb"])
def queue(request: pytest.FixtureRequest) -> Queue:
    if request.param == "memory":
        return InMemoryRunQueue()
    store: Any = request.getfixturevalue("store")
    threads = store.threads
    return DynamoDBRunQueue(threads.table_name, lambda: threads.client)


def entry(run_id: str, body: bytes = b'{"x": 1}') -> QueuedRun:
    return QueuedRun(run_id, "alice", ("chat",), body, utc_now(), 1_000.5)


async def test_entries_keep_their_order_and_their_contents(queue: Queue) -> None:
    big = b'{"text": "' + "Café ☕ ".encode() * 40_000 + b'"}'
    assert await queue.enqueue("t", "th", entry("r1", big), depth=3) == 1
    assert await queue.enqueue("t", "th", entry("r2"), depth=3) == 2
    assert [e.run_id for e in await queue.entries("t", "th")] == ["r1", "r2"]
    first = (await queue.entries("t", "th"))[0]
    assert first == entry("r1", big) or (first.body == big and first.scopes == ("chat",) and first.user_id == "alice")
    assert first.waiter_until == 1_000.5
    # another thread, another tenant: other queues
    assert await queue.entries("t", "other") == [] and await queue.entries("t2", "th") == []


async def test_the_depth_bounds_the_queue_and_a_queued_run_id_keeps_its_place(queue: Queue) -> None:
    for i in range(3):
        assert await queue.enqueue("t", "th", entry(f"r{i}"), depth=3) == i + 1
    assert await queue.enqueue("t", "th", entry("r3"), depth=3) is None
    assert await queue.enqueue("t", "th", entry("r1"), depth=3) == 2
    assert [e.run_id for e in await queue.entries("t", "th")] == ["r0", "r1", "r2"]


async def test_a_removal_frees_a_place_and_the_order_goes_on(queue: Queue) -> None:
    for i in range(3):
        await queue.enqueue("t", "th", entry(f"r{i}"), depth=3)
    assert await queue.remove("t", "th", "r0") is True
    assert await queue.remove("t", "th", "r0") is False
    assert await queue.enqueue("t", "th", entry("r3"), depth=3) == 3
    assert [e.run_id for e in await queue.entries("t", "th")] == ["r1", "r2", "r3"]


async def test_concurrent_enqueues_never_exceed_the_depth(queue: Queue) -> None:
    positions = await asyncio.gather(*(queue.enqueue("t", "th", entry(f"r{i}"), depth=3) for i in range(6)))
    taken = sorted(p for p in positions if p is not None)
    assert taken == [1, 2, 3]
    assert len(await queue.entries("t", "th")) == 3


async def test_a_queued_run_is_found_by_its_id_until_it_is_removed(queue: Queue) -> None:
    await queue.enqueue("t", "th", entry("r1"), depth=3)
    found = await queue.find("t", "r1")
    assert found is not None and (found.thread_id, found.user_id) == ("th", "alice")
    assert await queue.find("t2", "r1") is None and await queue.find("t", "r2") is None
    await queue.remove("t", "th", "r1")
    assert await queue.find("t", "r1") is None

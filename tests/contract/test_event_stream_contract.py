"""Contract of ``EventStream``: the same cases against the in-memory fake, fakeredis, a real redis-server and a
real one-node redis cluster (the protocol ElastiCache Serverless speaks).

The real server is the session's own (``redis_url`` starts it on a free port); every test uses fresh keys, so tests
never see each other's entries.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

import fakeredis
import pytest

from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.adapters.redis_stream import RedisEventStream, connect, run_stream_key, thread_stream_key
from shared.erasure import ErasableStreams
from shared.ports import BatchEventStream, EventStream, RetainedStream
from tests.support.redis_server import redis_server

StreamFactory = Callable[..., EventStream]

ENTRY_ID = re.compile(r"^\d+-\d+$")


def as_pair(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    with redis_server(cluster=True) as url:
        yield url


@pytest.fixture(params=["memory", "fakeredis", "redis", "redis-cluster"])
def backend(request: pytest.FixtureRequest) -> str:
    return cast(str, request.param)


@pytest.fixture
async def make_stream(backend: str, request: pytest.FixtureRequest) -> AsyncIterator[StreamFactory]:
    """``make_stream(max_len=...)``: a stream on this backend; clients are closed after the test."""
    url = ""
    if backend == "redis":
        url = cast(str, request.getfixturevalue("redis_url"))
    elif backend == "redis-cluster":
        url = cast(str, request.getfixturevalue("redis_cluster_url"))
    clients: list[Any] = []

    def build(*, max_len: int = 10_000) -> EventStream:
        if backend == "memory":
            return InMemoryEventStream(max_len=max_len)
        client: Any = (
            fakeredis.FakeAsyncRedis() if backend == "fakeredis" else connect(url, cluster=backend == "redis-cluster")
        )
        clients.append(client)
        return RedisEventStream(client, max_len=max_len)

    yield build
    for client in clients:
        await client.aclose()


@pytest.fixture
def stream(make_stream: StreamFactory) -> EventStream:
    return make_stream()


@pytest.fixture
def key() -> str:
    return run_stream_key("tenant-a", f"run-{uuid.uuid4().hex}")


async def test_append_returns_strictly_increasing_redis_style_ids(stream: EventStream, key: str) -> None:
    # GIVEN an empty stream  WHEN fifty events are appended back to back
    ids = [await stream.append(key, {"n": n}) for n in range(50)]
    # THEN every id reads "<ms>-<seq>" and each is greater than the one before
    assert all(ENTRY_ID.match(i) for i in ids)
    pairs = [as_pair(i) for i in ids]
    assert all(a < b for a, b in itertools.pairwise(pairs))


async def test_read_after_zero_replays_everything_in_order(stream: EventStream, key: str) -> None:
    # GIVEN five events
    events = [{"type": "TEXT_MESSAGE_CONTENT", "delta": f"part {n}"} for n in range(5)]
    ids = [await stream.append(key, e) for e in events]
    # WHEN reading after "0-0"
    entries = await stream.read_after(key, "0-0", block_ms=0)
    # THEN all five come back, in order, with the ids append returned
    assert [(e.id, e.event) for e in entries] == list(zip(ids, events, strict=True))


async def test_read_after_an_id_is_exclusive(stream: EventStream, key: str) -> None:
    # GIVEN five events
    ids = [await stream.append(key, {"n": n}) for n in range(5)]
    # WHEN reading after the third, and after the last
    after_third = await stream.read_after(key, ids[2], block_ms=0)
    after_last = await stream.read_after(key, ids[-1], block_ms=0)
    # THEN the first starts right after the third (not with it), the second is empty
    assert [e.id for e in after_third] == ids[3:]
    assert [e.event["n"] for e in after_third] == [3, 4]
    assert after_last == []


async def test_read_after_returns_at_most_count_entries(stream: EventStream, key: str) -> None:
    # GIVEN five events  WHEN reading with count=2, then on from the last id read
    ids = [await stream.append(key, {"n": n}) for n in range(5)]
    first = await stream.read_after(key, "0-0", block_ms=0, count=2)
    rest = await stream.read_after(key, first[-1].id, block_ms=0, count=10)
    # THEN two come first, the remaining three after
    assert [e.id for e in first] == ids[:2]
    assert [e.id for e in rest] == ids[2:]


async def test_a_blocking_read_returns_as_soon_as_another_task_appends(stream: EventStream, key: str) -> None:
    # GIVEN one event already read, and a reader blocked for up to five seconds after it
    seen = await stream.append(key, {"n": 0})
    started = time.monotonic()
    reader = asyncio.create_task(stream.read_after(key, seen, block_ms=5_000))
    await asyncio.sleep(0.1)
    assert not reader.done()
    # WHEN another task appends
    new_id = await stream.append(key, {"n": 1})
    entries = await asyncio.wait_for(reader, timeout=3)
    # THEN the reader gets just the new event, long before its timeout
    assert [(e.id, e.event) for e in entries] == [(new_id, {"n": 1})]
    assert time.monotonic() - started < 2.5


async def test_a_blocking_read_on_an_empty_stream_wakes_on_the_first_append(stream: EventStream, key: str) -> None:
    # GIVEN a reader blocked on a key that does not exist yet
    reader = asyncio.create_task(stream.read_after(key, "0-0", block_ms=5_000))
    await asyncio.sleep(0.1)
    # WHEN the first event is appended  THEN the reader gets it
    first = await stream.append(key, {"type": "RUN_STARTED"})
    entries = await asyncio.wait_for(reader, timeout=3)
    assert [(e.id, e.event) for e in entries] == [(first, {"type": "RUN_STARTED"})]


async def test_a_blocking_read_with_nothing_new_returns_empty_after_block_ms(stream: EventStream, key: str) -> None:
    # GIVEN a stream whose last event was already read
    last = await stream.append(key, {"n": 0})
    # WHEN blocking 300 ms for more
    started = time.monotonic()
    entries = await stream.read_after(key, last, block_ms=300)
    elapsed = time.monotonic() - started
    # THEN nothing comes back, after about 300 ms
    assert entries == []
    assert 0.25 <= elapsed < 2.0


async def test_events_round_trip_as_json_dicts(stream: EventStream, key: str) -> None:
    # GIVEN an event with unicode, nesting and every JSON type
    event: dict[str, Any] = {
        "type": "TEXT_MESSAGE_CONTENT",
        "delta": 'héllo 😀 世界 \u2028 "quoted" \\ back',
        "nested": {"list": [1, 2.5, True, None, "x"], "empty": {}},
        "count": 0,
    }
    # WHEN appended and read
    entry_id = await stream.append(key, event)
    (entry,) = await stream.read_after(key, "0-0", block_ms=0)
    # THEN the same dict comes back; tuples come back as lists, as JSON has no tuples
    assert (entry.id, entry.event) == (entry_id, event)
    await stream.append(key, {"pair": (1, 2)})
    (pair,) = await stream.read_after(key, entry_id, block_ms=0)
    assert pair.event == {"pair": [1, 2]}


async def test_separate_keys_are_independent(stream: EventStream) -> None:
    # GIVEN two keys
    one = run_stream_key("tenant-a", f"r1-{uuid.uuid4().hex}")
    two = run_stream_key("tenant-a", f"r2-{uuid.uuid4().hex}")
    # WHEN each gets its own events, and a reader blocks on the second while the first grows
    await stream.append(one, {"k": 1})
    await stream.append(two, {"k": 2})
    (last_two,) = await stream.read_after(two, "0-0", block_ms=0)
    reader = asyncio.create_task(stream.read_after(two, last_two.id, block_ms=300))
    await asyncio.sleep(0.05)
    await stream.append(one, {"k": 1, "again": True})
    # THEN each key replays only its own events, and an append elsewhere does not wake the reader
    assert [e.event for e in await stream.read_after(one, "0-0", block_ms=0)] == [{"k": 1}, {"k": 1, "again": True}]
    assert [e.event for e in await stream.read_after(two, "0-0", block_ms=0)] == [{"k": 2}]
    assert await reader == []


async def test_a_capped_stream_keeps_a_contiguous_run_of_the_newest_events(
    make_stream: StreamFactory, key: str
) -> None:
    # GIVEN a stream capped at 10 entries (Redis trims approximately: at least 10 stay)
    stream = make_stream(max_len=10)
    # WHEN 300 events are appended
    ids = [await stream.append(key, {"n": n}) for n in range(300)]
    entries = await stream.read_after(key, "0-0", block_ms=0, count=1_000)
    # THEN the oldest are gone, and what is left is the newest events, in order, without holes
    assert 10 <= len(entries) < 300
    assert [e.id for e in entries] == ids[-len(entries) :]
    assert [e.event["n"] for e in entries] == list(range(300 - len(entries), 300))


async def test_delete_removes_streams_on_any_slot_and_leaves_others(stream: EventStream, key: str) -> None:
    # GIVEN three streams (a run's and a thread's of tenant-a, in different cluster slots; one of tenant-b)
    thread_key, other_key = thread_stream_key("tenant-a", "th-1"), thread_stream_key("tenant-b", "th-1")
    for k in (key, thread_key, other_key):
        await stream.append(k, {"type": "RUN_STARTED"})
    # WHEN the first two (and a key that does not exist) are deleted
    await cast(ErasableStreams, stream).delete([key, thread_key, run_stream_key("tenant-a", "never-written")])
    # THEN they read empty, a new append starts them again, and the other stream is whole
    assert await stream.read_after(key, "0-0", block_ms=0) == []
    assert await stream.read_after(thread_key, "0-0", block_ms=0) == []
    assert [e.event for e in await stream.read_after(other_key, "0-0", block_ms=0)] == [{"type": "RUN_STARTED"}]
    await stream.append(key, {"type": "RUN_STARTED"})
    assert len(await stream.read_after(key, "0-0", block_ms=0)) == 1
    await cast(ErasableStreams, stream).delete([])


async def test_expire_keeps_the_stream_until_the_ttl_passes(stream: EventStream, key: str) -> None:
    # GIVEN a stream with one event and a one-second TTL
    await stream.append(key, {"type": "RUN_FINISHED"})
    await stream.expire(key, 1)
    # WHEN reading at once, and again after the TTL
    before = await stream.read_after(key, "0-0", block_ms=0)
    await asyncio.sleep(1.3)
    after = await stream.read_after(key, "0-0", block_ms=0)
    # THEN the event is there until the TTL passes, then the stream is gone
    assert [e.event for e in before] == [{"type": "RUN_FINISHED"}]
    assert after == []


async def test_oldest_id_names_the_oldest_entry_still_held_and_none_once_the_key_holds_nothing(
    make_stream: StreamFactory, key: str
) -> None:
    # GIVEN a capped stream that trimmed its oldest entries
    stream = make_stream(max_len=10)
    assert isinstance(stream, RetainedStream)
    assert await stream.oldest_id(key) is None  # never written
    ids = [await stream.append(key, {"n": n}) for n in range(300)]
    held = await stream.read_after(key, "0-0", block_ms=0, count=1_000)
    # THEN its oldest id is the first entry a full read returns (everything after an id at or past it is held)
    assert await stream.oldest_id(key) == held[0].id != ids[0]
    # AND once the key expired, it holds nothing
    await stream.expire(key, 0)
    assert await stream.oldest_id(key) is None


@pytest.mark.parametrize("backend", ["fakeredis", "redis", "redis-cluster"])  # the TTL is read back with TTL
async def test_every_key_a_batch_writes_gets_the_streams_ttl(make_stream: StreamFactory, key: str) -> None:
    stream = make_stream()
    assert isinstance(stream, RedisEventStream)
    other = thread_stream_key("tenant-a", f"th-{uuid.uuid4().hex}")
    await cast(BatchEventStream, stream).append_batch([(key, {"n": 1}), (other, {"n": 2}), (key, {"n": 3})])
    client = stream._client  # the adapter's own client: the test reads what the server holds
    for written in (key, other):
        assert 0 < await client.ttl(written) <= 24 * 3600

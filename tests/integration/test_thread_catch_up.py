"""A thread follower whose last id the stream no longer holds (trimmed, or the stream expired) catches up from the
stored conversation (``ThreadService.events``), on a real redis-server; one whose id is still held gets exactly
the events after it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.redis_stream import RedisEventStream, connect
from shared.models import Identity, Message, Role
from shared.ports import StreamEntry
from shared.runs.service import RunService
from shared.stream_keys import thread_stream_key
from shared.threads import ThreadService

USER = Identity(tenant_id="t", user_id="u")


@pytest.fixture
async def stream(redis_url: str) -> AsyncIterator[RedisEventStream]:
    redis = RedisEventStream(connect(redis_url, cluster=False), max_len=5)  # a stream that keeps 5 entries, about
    yield redis
    await redis.close()


async def a_thread(stream: RedisEventStream) -> tuple[ThreadService, str, list[str]]:
    """A thread with two stored messages, and a stream that trimmed most of the 400 events written to it."""
    store = InMemoryStore()
    thread_id = f"th-{uuid.uuid4().hex[:8]}"
    await store.threads.open_thread(USER, thread_id)
    await store.threads.append_messages(
        USER,
        thread_id,
        [
            Message(id="u-1", thread_id=thread_id, role=Role.USER, content="hi", run_id="r1"),
            Message(id="a-1", thread_id=thread_id, role=Role.ASSISTANT, content="hello", run_id="r1"),
        ],
    )
    key = thread_stream_key(USER.tenant_id, thread_id)
    ids = [await stream.append(key, {"type": "STEP_STARTED", "n": n, "metadata": {"runId": "r1"}}) for n in range(400)]
    runs = RunService(store.threads, store.runs, store.audit, stream)
    return ThreadService(store.threads, store.runs, store.audit, runs), thread_id, ids


async def first_entries(entries: AsyncIterator[StreamEntry | None], count: int) -> list[StreamEntry]:
    out: list[StreamEntry] = []
    async for entry in entries:
        if entry is not None:
            out.append(entry)
        if len(out) >= count or entry is None:
            break
    return out


async def test_a_follower_whose_id_was_trimmed_gets_the_stored_conversation_then_only_new_events(
    stream: RedisEventStream,
) -> None:
    threads, thread_id, ids = await a_thread(stream)
    # WHEN a follower comes back with an id the stream trimmed long ago
    entries = await threads.events(USER, thread_id, after=ids[10], deadline=None)
    seen = await first_entries(entries, 1)
    # THEN it gets the stored conversation first, without asking, and its id is where the live events go on
    assert seen[0].event["type"] == "MESSAGES_SNAPSHOT"
    assert [m["id"] for m in seen[0].event["messages"]] == ["u-1", "a-1"]
    # (no active run: the events after the snapshot are new ones only)
    assert int(seen[0].id.split("-")[0]) >= int(ids[-1].split("-")[0])


async def test_a_follower_whose_id_is_held_gets_exactly_what_followed_it(stream: RedisEventStream) -> None:
    threads, thread_id, ids = await a_thread(stream)
    entries = await threads.events(USER, thread_id, after=ids[-3], deadline=None)
    seen = await first_entries(entries, 2)
    assert [e.id for e in seen] == ids[-2:]

"""A response that tails a run executing in its own process takes the run's entries from the local feed, on a real
redis-server: the same frames a stream read gives, without reading them back; and the stream takes over whenever
the feed cannot vouch for the rest (a write failed, a takeover ended the run elsewhere)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ag_ui.core import TextMessageContentEvent, TextMessageEndEvent, TextMessageStartEvent

from functions.agent_api.sse import frame
from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.redis_stream import RedisEventStream, connect
from shared.executors.context import RunContext
from shared.ports import StreamEntry
from shared.run_events.emitter import RunEmitter, is_terminal
from shared.run_results import ExecutionResult
from shared.runs.service import RunService
from shared.runs.tailing import StreamTail
from shared.stream_keys import thread_stream_key
from tests.support.run_rigs import a_context


class CountingStream(RedisEventStream):
    """The Redis adapter, counting reads per key and failing writes on request."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: dict[str, int] = {}
        self.fail_writes = False

    async def read_after(self, key: str, after_id: str, *, block_ms: int, count: int = 100) -> list[StreamEntry]:
        self.reads[key] = self.reads.get(key, 0) + 1
        return await super().read_after(key, after_id, block_ms=block_ms, count=count)

    async def append_batch(self, entries: Any, *, clear: str | None = None, encoded: Any = None) -> list[str]:
        if self.fail_writes:
            raise ConnectionError("redis down")
        return await super().append_batch(entries, clear=clear, encoded=encoded)


class Talks:
    """Streams ``words`` text deltas, pausing between them; ``between`` runs after the first one."""

    step_name = "worker"

    def __init__(self, words: int = 40, between: Any = None) -> None:
        self.words = words
        self.between = between

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult:
        await emitter.emit(TextMessageStartEvent(message_id="m1", role="assistant"))
        for index in range(self.words):
            await emitter.emit(TextMessageContentEvent(message_id="m1", delta=f"w{index} "))
            if index == 0 and self.between is not None:
                await self.between(emitter)
            await asyncio.sleep(0.002)
        await emitter.emit(TextMessageEndEvent(message_id="m1"))
        return ExecutionResult()


@pytest.fixture
async def stream(redis_url: str) -> AsyncIterator[CountingStream]:
    counting = CountingStream(connect(redis_url, cluster=False))
    yield counting
    await counting.close()


class NotHere:
    """A process where no run executes: its tails read the stream."""

    def is_running(self, tenant_id: str, run_id: str) -> bool:
        return False

    def settled_here(self, tenant_id: str, run_id: str) -> bool:
        return True

    def feed(self, tenant_id: str, run_id: str) -> None:
        return None


async def frames_of(entries: AsyncIterator[StreamEntry | None]) -> list[str]:
    out = []
    async for entry in entries:
        if entry is not None:
            out.append(frame(entry))
            if is_terminal(entry.event):
                break
    return out


async def test_the_starting_response_gets_every_frame_a_stream_read_gives_without_reading_the_run_stream(
    stream: CountingStream,
) -> None:
    store = InMemoryStore()
    runs = RunService(store.threads, store.runs, store.audit, stream, heartbeat_s=60, lease_s=120)
    ctx = a_context("r-feed", thread_id="th-feed")
    # GIVEN a run of 40 deltas admitted in this process
    await runs.admit(ctx, body_digest="d", new_messages=[], executor=Talks())
    # WHEN its response tails it here, and a response of another process (no feed) tails the same stream
    local = await frames_of(runs.tail_run("t", "r-feed"))
    await runs.wait_idle()
    key = thread_stream_key("t", "th-feed")  # the run's home: its thread's stream
    reads_before_remote = stream.reads.get(key, 0)
    elsewhere = StreamTail(store.runs, stream, NotHere(), invocation_deadline=lambda: 10**10)
    remote = await frames_of(elsewhere.tail_run("t", "r-feed"))
    reads_by_remote = stream.reads.get(key, 0) - reads_before_remote
    assert reads_before_remote == 0 and reads_by_remote >= 1
    # THEN both got the same frames, ids and JSON text alike, through the terminal event
    assert len(local) == 40 + 4  # RUN_STARTED, the message's start, 40 deltas, its end, RUN_FINISHED
    assert local == remote
    # AND only the other response read the run stream
    assert stream.reads.get(key, 0) == reads_by_remote


async def test_a_response_resuming_mid_run_in_the_same_process_gets_the_rest_from_the_feed(
    stream: CountingStream,
) -> None:
    store = InMemoryStore()
    runs = RunService(store.threads, store.runs, store.audit, stream, heartbeat_s=60, lease_s=120)
    ctx = a_context("r-resume", thread_id="th-resume")
    await runs.admit(ctx, body_digest="d", new_messages=[], executor=Talks(words=30))
    # GIVEN a client that read up to its fifth event, then reconnected with Last-Event-ID
    first = []
    async for entry in runs.tail_run("t", "r-resume"):
        if entry is not None:
            first.append(entry)
            if len(first) == 5:
                break
    rest = await frames_of(runs.tail_run("t", "r-resume", after=first[-1].id))
    await runs.wait_idle()
    # THEN none of it was read back from the stream
    assert stream.reads.get(thread_stream_key("t", "th-resume"), 0) == 0
    # AND it got what followed, once, through the terminal event: with the first five, the whole stream
    everything = await frames_of(
        StreamTail(store.runs, stream, NotHere(), invocation_deadline=lambda: 10**10).tail_run(
            "t", "r-resume"
        )
    )
    assert [frame(e) for e in first] + rest == everything


async def test_a_failed_write_sends_the_response_back_to_the_stream_and_it_still_gets_every_event(
    stream: CountingStream,
) -> None:
    async def outage(emitter: RunEmitter) -> None:
        # The next writes fail (the emitter buffers, the feed gives up); the stream is back 30 ms later, and the
        # backlog goes out in order at the emitter's next retry.
        stream.fail_writes = True
        asyncio.get_running_loop().call_later(0.03, setattr, stream, "fail_writes", False)

    store = InMemoryStore()

    runs = RunService(store.threads, store.runs, store.audit, stream, heartbeat_s=60, lease_s=120)
    ctx = a_context("r-outage", thread_id="th-outage")
    await runs.admit(ctx, body_digest="d", new_messages=[], executor=Talks(words=10, between=outage))
    # WHEN the response tails the run across the failed writes
    local = await frames_of(runs.tail_run("t", "r-outage"))
    await runs.wait_idle()
    # THEN it went on from the stream and got every event once, in order, ending with RUN_FINISHED
    deltas = [f for f in local if "TEXT_MESSAGE_CONTENT" in f]
    assert [d.split('"delta":"')[1].split('"')[0] for d in deltas] == [f"w{i} " for i in range(10)]
    assert "RUN_FINISHED" in local[-1]
    assert stream.reads.get(thread_stream_key("t", "th-outage"), 0) >= 1
    ids = [f.split("\n")[0] for f in local]
    assert len(ids) == len(set(ids))


async def test_a_run_taken_over_elsewhere_ends_its_local_response_with_the_terminal_event_on_the_stream(
    stream: CountingStream,
) -> None:
    terminal = {"type": "RUN_ERROR", "message": "taken over", "code": "run_failed", "metadata": {"runId": "r-taken"}}

    async def taken_over(emitter: RunEmitter) -> None:
        # Another process took the thread over: it wrote the old run's terminal event, and this run writes no more.
        emitter.discard()
        await stream.append(thread_stream_key("t", "th-taken"), terminal)

    store = InMemoryStore()

    runs = RunService(store.threads, store.runs, store.audit, stream, heartbeat_s=60, lease_s=120)
    ctx = a_context("r-taken", thread_id="th-taken")
    await runs.admit(ctx, body_digest="d", new_messages=[], executor=Talks(words=3, between=taken_over))
    local = await asyncio.wait_for(frames_of(runs.tail_run("t", "r-taken")), 10)
    await runs.wait_idle()
    # THEN the response ended with the other process's terminal event, read from the stream
    assert '"code":"run_failed"' in local[-1]
    assert sum('"type":"RUN_ERROR"' in f or '"type":"RUN_FINISHED"' in f for f in local) == 1

"""Tailing on its own (``shared.runs.tailing.StreamTail``), on the in-memory adapters: a run's tail always ends with
exactly one terminal event (the stream's, one rebuilt from the ledger, or ``stream_unavailable``), and a response
closes before its invocation's deadline."""

from __future__ import annotations

import time
from typing import Any

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.models import ExecutionMeta, Run
from shared.ports import StreamEntry
from shared.runs.tailing import StreamTail
from shared.stream_keys import thread_stream_key

KEY = thread_stream_key("t", "th")
"""A visible run's home: its thread's stream, its events tagged with their run."""
R1 = {"metadata": {"runId": "r1"}}


class KnownRuns:
    """What this process knows of its runs, set by the test."""

    def __init__(self, *, running: bool = False, settled: bool = False) -> None:
        self.running = running
        self.settled = settled

    def is_running(self, tenant_id: str, run_id: str) -> bool:
        return self.running

    def settled_here(self, tenant_id: str, run_id: str) -> bool:
        return self.settled

    def feed(self, tenant_id: str, run_id: str) -> None:
        return None  # these tests read the stream (tests/unit/test_local_feed.py covers the feed)


class Unreachable(InMemoryEventStream):
    async def read_after(self, key: str, after_id: str, *, block_ms: int, count: int = 100) -> Any:
        raise ConnectionError("redis down")


def a_tail(store: InMemoryStore, stream: InMemoryEventStream, local: KnownRuns, **kwargs: Any) -> StreamTail:
    return StreamTail(
        store.runs, stream, local, invocation_deadline=lambda: time.time() + 60, ping_interval_s=0.05, **kwargs
    )


async def an_ended_run(store: InMemoryStore) -> None:
    await store.runs.create_run(Run(run_id="r1", thread_id="th", tenant_id="t", user_id="u", meta=ExecutionMeta()))
    await store.runs.finish_run("t", "r1", status="succeeded", usage=[], last_stream_id=None, error_code=None)


async def collect(entries: Any, limit: int = 50) -> list[StreamEntry | None]:
    seen: list[StreamEntry | None] = []
    async for entry in entries:
        seen.append(entry)
        if len(seen) >= limit:
            break
    return seen


async def test_a_run_that_settled_here_without_its_terminal_event_gets_one_rebuilt_from_the_ledger() -> None:
    # GIVEN a run this process settled, whose terminal event never reached the stream
    store, stream = InMemoryStore(), InMemoryEventStream()
    await an_ended_run(store)
    await stream.append(KEY, {"type": "RUN_STARTED", "threadId": "th", "runId": "r1", **R1})
    # WHEN a reader tails it
    seen = await collect(a_tail(store, stream, KnownRuns(settled=True)).tail_run("t", "r1"))
    # THEN it gets the stream's event, then a terminal event rebuilt from the ledger (no id: not on the stream)
    last = seen[-1]
    assert [e.event["type"] for e in seen if e is not None] == ["RUN_STARTED", "RUN_FINISHED"]
    assert last is not None and last.id == "" and last.event["metadata"]["rebuiltFromLedger"] is True


async def test_while_the_run_settles_here_the_reader_waits_for_the_real_terminal_event() -> None:
    # GIVEN a run the ledger says ended, still settling in this process (its terminal event is on its way)
    store, stream = InMemoryStore(), InMemoryEventStream()
    await an_ended_run(store)
    # WHEN a reader tails it for a while
    seen = await collect(a_tail(store, stream, KnownRuns(running=True)).tail_run("t", "r1"), limit=3)
    # THEN it only pings: nothing is rebuilt
    assert seen == [None, None, None]


async def test_a_stream_that_stays_unreachable_ends_the_tail_with_stream_unavailable() -> None:
    store = InMemoryStore()
    tail = a_tail(store, Unreachable(), KnownRuns(), stream_outage_grace_s=0.1)
    seen = await collect(tail.tail_run("t", "r1"))
    assert len(seen) == 1 and seen[0] is not None and seen[0].event["code"] == "stream_unavailable"


async def test_a_thread_tail_closes_before_its_invocation_deadline() -> None:
    # GIVEN an invocation whose deadline is closer than the tail's margin
    store, stream = InMemoryStore(), InMemoryEventStream()
    tail = a_tail(store, stream, KnownRuns(), tail_deadline_margin_s=5.0)
    # WHEN a thread's events are tailed
    seen = await collect(tail.tail("thread:t:th:events", until_terminal=False, deadline=time.time() + 5.2))
    # THEN the response closes by itself (after a few pings), without waiting for the client to leave
    assert seen and len(seen) < 50 and all(entry is None for entry in seen)

"""A run's end leaves its Redis connections usable, on a real redis-server.

Each run blocks on its control stream (the cancel signal). Cancelling that blocking read at the run's end made
redis-py drop the connection, so every run opened a new one (TCP connect, HELLO, CLIENT SETINFO) while the next
runs started: under 16 simultaneous runs that connection churn sat on the path to the model request. The run now
wakes its own watcher with a stop entry, the read returns, and the connection goes back to the pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.redis_stream import RedisEventStream, connect
from shared.run_events.emitter import is_terminal
from shared.runs.service import RunService
from shared.runs.watch import CONTROL_TTL_S, STOP_SIGNAL
from shared.stream_keys import run_control_key
from tests.support.run_rigs import SaysHello, a_context

RUNS = 6


def connections_received(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("stats")["total_connections_received"])
    finally:
        client.close()


@pytest.fixture
async def event_stream(redis_url: str) -> AsyncIterator[RedisEventStream]:
    stream = RedisEventStream(connect(redis_url, cluster=False))
    yield stream
    await stream.close()


async def one_run(runs: RunService, run_id: str) -> None:
    ctx = a_context(run_id, thread_id=f"th-{run_id}")
    await runs.admit(ctx, body_digest="d", new_messages=[], executor=SaysHello())
    async for entry in runs.tail_run("t", run_id):  # as the POST's response does
        if entry is not None and is_terminal(entry.event):
            break
    await runs.wait_idle()


async def test_sequential_runs_reuse_their_redis_connections(redis_url: str, event_stream: RedisEventStream) -> None:
    store = InMemoryStore()
    runs = RunService(store.threads, store.runs, store.audit, event_stream, heartbeat_s=60, lease_s=120)
    await one_run(runs, "r0")  # the pool's first connections
    before = connections_received(redis_url)
    # WHEN more runs start and end one after the other
    for index in range(1, RUNS + 1):
        await one_run(runs, f"r{index}")
    # THEN no run opened a connection of its own (only this test's INFO queries count)
    opened = connections_received(redis_url) - before - 1
    assert opened == 0, f"{opened} new connections for {RUNS} runs"


async def test_a_finished_runs_control_stream_says_it_stopped_and_expires(
    redis_url: str, event_stream: RedisEventStream
) -> None:
    store = InMemoryStore()
    runs = RunService(store.threads, store.runs, store.audit, event_stream, heartbeat_s=60, lease_s=120)
    await asyncio.wait_for(one_run(runs, "r1"), timeout=10)
    client = redis.Redis.from_url(redis_url)
    try:
        key = run_control_key("t", "r1")
        entries = client.xrange(key)
        assert [fields[b"e"] for _id, fields in entries] == [f'{{"type":"{STOP_SIGNAL}"}}'.encode()]
        assert 0 < client.ttl(key) <= CONTROL_TTL_S
    finally:
        client.close()


async def test_new_connections_do_not_look_up_the_driver_version_each(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py resolves the version it reports with CLIENT SETINFO from the installed distributions' metadata,
    by default once per new connection (3 ms of CPU here); a burst of runs grows the pool by a connection per run."""
    import redis.utils

    lookups: list[str] = []
    real = redis.utils.get_lib_version

    def counted() -> str:
        lookups.append("version")
        return str(real())

    monkeypatch.setattr(redis.utils, "get_lib_version", counted)
    client = connect(redis_url, cluster=False)
    try:
        # WHEN eight commands run at once, each on a connection of its own
        await asyncio.gather(*(client.blpop([f"nothing-{i}"], timeout=0.05) for i in range(8)))
        connections = len(await client.client_list())
    finally:
        await client.aclose()
    # THEN the pool opened them all, and the version was looked up once, when the client was made
    assert connections >= 8
    assert len(lookups) <= 1

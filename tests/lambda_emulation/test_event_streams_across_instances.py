"""Redis forgets, the record remembers (issue 41), across two instances sharing one moto server and one
redis-server: a thread follower on B whose stream expired catches up from DynamoDB (a ``MESSAGES_SNAPSHOT``,
then the live events A writes, with no gap and no repeat); a reader of a run whose stream expired gets the
run's stored outcome at once; and a run's reader resumes exactly by ``Last-Event-ID`` on the other instance,
its coalesced text whole."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from shared.stream_keys import thread_stream_key
from tests.support.lambda_instance import Instance
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.sse import SseFrame, iter_sse_frames
from tests.support.streams import TERMINAL, body, data_frames
from tests.support.tokens import bearer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TENANT = "tenant-1"
WORDS = [f"mot{i} é世🙂 " for i in range(60)]


async def expire_now(redis_url: str, key: str) -> None:
    """Let Redis expire ``key`` as its retention would: a TTL of 1 ms, then wait it out."""
    client = Redis.from_url(redis_url)
    try:
        assert await client.pexpire(key, 1)
        await asyncio.sleep(0.05)
        assert await client.exists(key) == 0
    finally:
        await client.aclose()


async def follow(client: httpx.AsyncClient, url: str, headers: dict[str, str], until_run: str) -> list[SseFrame]:
    """A thread follower's frames until ``until_run``'s terminal event."""
    frames: list[SseFrame] = []
    async with client.stream("GET", url, headers={**bearer(), **headers}) as response:
        assert response.status_code == 200
        async for frame in iter_sse_frames(response, strict_eof=False):
            if frame.data is None:
                continue
            frames.append(frame)
            event = frame.json()
            if event["type"] in TERMINAL and event["metadata"]["runId"] == until_run:
                break
    return frames


async def test_a_follower_on_b_whose_thread_stream_expired_catches_up_from_the_table_then_follows_a(
    instances: tuple[Instance, Instance], model_server: ModelServer, redis_url: str
) -> None:
    a, b = instances
    model_server.enqueue(ScriptedTurn(text=["Hello ", "there."]), ScriptedTurn(text=WORDS, chunk_delay_s=0.005))
    async with httpx.AsyncClient(timeout=60) as client:
        # GIVEN a finished run on A, followed on B up to its last event
        first = await client.post(f"{a.url}/api/v1/agent", json=body("th-gone", "run-1"), headers=bearer())
        assert first.status_code == 200
        seen = await asyncio.wait_for(
            follow(client, f"{b.url}/api/v1/threads/th-gone/events", {}, until_run="run-1"), 30
        )
        last_id = seen[-1].id
        assert last_id
        # AND the thread's stream expired since (its retention)
        await expire_now(redis_url, thread_stream_key(TENANT, "th-gone"))
        # WHEN the follower reconnects to B with its last id, and A then runs the next message
        follower = asyncio.create_task(
            follow(client, f"{b.url}/api/v1/threads/th-gone/events", {"Last-Event-ID": last_id}, until_run="run-2")
        )
        await asyncio.sleep(1.0)
        second = await client.post(
            f"{a.url}/api/v1/agent", json=body("th-gone", "run-2", "more?", "u-2"), headers=bearer()
        )
        frames = await asyncio.wait_for(follower, 30)
    # THEN it first gets the stored conversation, without asking, and then the new run whole: nothing missed,
    # nothing twice
    events = [f.json() for f in frames]
    assert events[0]["type"] == "MESSAGES_SNAPSHOT"
    snapshot = events[0]["messages"]
    assert [m["role"] for m in snapshot] == ["user", "assistant"]
    assert snapshot[1]["content"] == "Hello there."
    live = events[1:]
    assert {e["metadata"]["runId"] for e in live} == {"run-2"}
    assert live[0]["type"] == "RUN_STARTED" and live[-1]["type"] == "RUN_FINISHED"
    assert "".join(e["delta"] for e in live if e["type"] == "TEXT_MESSAGE_CONTENT") == "".join(WORDS)
    ids = [f.id for f in frames[1:]]
    assert len(ids) == len(set(ids)) and all(ids)
    assert [e["type"] for e in events].count("RUN_STARTED") == 1
    # AND the live events are exactly what A's own response streamed
    assert [f.json() for f in data_frames(second.text)] == live


async def test_a_reader_of_a_run_whose_stream_expired_gets_its_stored_outcome_at_once(
    instances: tuple[Instance, Instance], model_server: ModelServer, redis_url: str
) -> None:
    a, b = instances
    model_server.enqueue(ScriptedTurn(text=["done"]))
    async with httpx.AsyncClient(timeout=60) as client:
        # GIVEN a run that ended on A, and whose stream has expired
        first = await client.post(f"{a.url}/api/v1/agent", json=body("th-old", "run-old"), headers=bearer())
        last_id = [f.id for f in data_frames(first.text) if f.id][-1]
        await expire_now(redis_url, thread_stream_key(TENANT, "th-old"))
        # WHEN readers on B replay it, from the start or from the last id they had
        started = time.monotonic()
        replay = await client.get(f"{b.url}/api/v1/agent/runs/run-old/events", headers=bearer())
        resumed = await client.get(
            f"{b.url}/api/v1/agent/runs/run-old/events", headers={**bearer(), "Last-Event-ID": last_id}
        )
        took = time.monotonic() - started
    # THEN each gets the run's terminal event rebuilt from the ledger, without waiting on the stream
    for response in (replay, resumed):
        events = [f.json() for f in data_frames(response.text)]
        assert response.status_code == 200
        assert [e["type"] for e in events] == ["RUN_FINISHED"]
        assert events[0]["outcome"] == {"type": "success"}
        assert events[0]["metadata"]["rebuiltFromLedger"] is True
    assert took < 5.0, took


async def test_a_run_read_on_b_resumes_exactly_after_the_last_id_it_got_from_a(
    instances: tuple[Instance, Instance], model_server: ModelServer
) -> None:
    a, b = instances
    model_server.enqueue(ScriptedTurn(text=WORDS, chunk_delay_s=0.01))
    events: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=60) as client:
        # GIVEN a client of A that leaves after a few text events
        request = client.stream("POST", f"{a.url}/api/v1/agent", json=body("th-res", "run-res"), headers=bearer())
        async with request as r:
            last_id = ""
            async for frame in iter_sse_frames(r, strict_eof=False):
                if frame.data is None:
                    continue
                events.append(frame.json())
                last_id = frame.id or last_id
                if sum(e["type"] == "TEXT_MESSAGE_CONTENT" for e in events) >= 3:
                    break
        # WHEN it resumes on B with its last id
        rest = await client.get(
            f"{b.url}/api/v1/agent/runs/run-res/events", headers={**bearer(), "Last-Event-ID": last_id}
        )
    # THEN it gets what followed, once: with what it had, the whole answer exactly
    events += [f.json() for f in data_frames(rest.text)]
    assert [e["type"] for e in events].count("RUN_STARTED") == 1 and events[-1]["type"] == "RUN_FINISHED"
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "".join(WORDS)
    assert sum(e["type"] == "TEXT_MESSAGE_CONTENT" for e in events) < len(WORDS)  # batched

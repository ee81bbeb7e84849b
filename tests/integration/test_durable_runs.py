"""Durable runs on real sockets: resume after a dropped connection, idempotent admission, busy threads, cancel."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shared.llm.types import ToolSpec
from shared.tools.registry import ServerTool, ToolContext, ToolRegistry
from shared.wiring import ServiceOverrides, Services
from tests.support.live_app import serve_app
from tests.support.model_server import ModelServer, ScriptedToolCall, ScriptedTurn
from tests.support.settings import make_settings
from tests.support.sse import SseFrame, iter_sse_frames, parse_sse
from tests.support.tokens import bearer

pytestmark = pytest.mark.e2e


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


class BlockingClock:
    """A ``get_current_time`` that never returns until cancelled: a tool call in flight."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    def tool(self) -> ServerTool:
        async def handler(_args: dict[str, Any], _ctx: ToolContext) -> str:
            self.started.set()
            await asyncio.sleep(3600)
            return "{}"

        spec = ToolSpec(name="get_current_time", description="time", parameters={"type": "object"})
        return ServerTool(spec=spec, handler=handler)


@pytest.fixture
def blocking_clock() -> BlockingClock:
    return BlockingClock()


@pytest.fixture
def live(store: Any, redis_url: str, model_server: ModelServer, blocking_clock: BlockingClock) -> Iterator[str]:
    settings = make_settings(redis_url=redis_url, llm_base_url=model_server.base_url, llm_api_key="k")
    registry = ToolRegistry()
    registry.register(blocking_clock.tool())
    with serve_app(Services(settings, overrides=ServiceOverrides(tools=registry, store=store))) as url:
        yield url


def body(thread: str, run: str, text: str = "count slowly", mid: str = "u-1") -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [{"id": mid, "role": "user", "content": text}]}


def data_frames(frames: list[SseFrame]) -> list[SseFrame]:
    return [f for f in frames if f.data is not None]


def slow_text(n: int = 8, delay: float = 0.25) -> ScriptedTurn:
    return ScriptedTurn(text=[f"w{i} " for i in range(n)], chunk_delay_s=delay)


async def read_some(url: str, payload: dict[str, Any], count: int) -> list[SseFrame]:
    """POST a run, read ``count`` event frames, then drop the connection."""
    got: list[SseFrame] = []
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", f"{url}/api/v1/agent", json=payload, headers=bearer()) as resp,
    ):
        async for frame in iter_sse_frames(resp, strict_eof=False):
            if frame.data is not None:
                got.append(frame)
            if len(got) >= count:
                break
    return got


async def get_events(url: str, run_id: str, *, last_event_id: str | None = None, query: bool = False) -> list[SseFrame]:
    headers = bearer()
    params: dict[str, str] = {}
    if last_event_id and query:
        params["lastEventId"] = last_event_id
    elif last_event_id:
        headers["Last-Event-ID"] = last_event_id
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.get(f"{url}/api/v1/agent/runs/{run_id}/events", headers=headers, params=params)
    assert resp.status_code == 200, resp.text
    return data_frames(parse_sse(resp.text))


async def test_dropped_connection_resumes_with_last_event_id_exactly_once(live: str, model_server: ModelServer) -> None:
    # GIVEN a run whose model streams slowly, and a client that drops after four events
    model_server.enqueue(slow_text())
    first = await read_some(live, body("th-resume", "run-resume"), 4)
    assert len(first) == 4
    # WHEN it reconnects with the id of the last event it saw (the run is still going)
    rest = await get_events(live, "run-resume", last_event_id=first[-1].id)
    # THEN it receives every remaining event exactly once, ending with the terminal event
    assert rest[-1].json()["type"] == "RUN_FINISHED"
    whole = await get_events(live, "run-resume")
    assert [f.id for f in first + rest] == [f.id for f in whole]
    assert [f.json() for f in first + rest] == [f.json() for f in whole]
    # AND the same works after the run ended, with the id as a query parameter
    again = await get_events(live, "run-resume", last_event_id=first[1].id, query=True)
    assert [f.id for f in again] == [f.id for f in whole[2:]]


async def test_disconnected_client_does_not_stop_the_run(live: str, model_server: ModelServer) -> None:
    model_server.enqueue(slow_text(6, 0.2))
    await read_some(live, body("th-gone", "run-gone"), 2)
    events = await get_events(live, "run-gone")
    assert events[-1].json()["type"] == "RUN_FINISHED"
    async with httpx.AsyncClient() as client:
        history = (await client.get(f"{live}/api/v1/threads/th-gone/history", headers=bearer())).json()["items"]
    assert history[-1]["role"] == "assistant" and history[-1]["content"].startswith("w0 w1")


async def test_repeated_post_attaches_to_one_run_and_a_different_body_conflicts(
    live: str, model_server: ModelServer
) -> None:
    # GIVEN a live run
    model_server.enqueue(slow_text(6, 0.2))
    payload = body("th-idem", "run-idem")
    async with httpx.AsyncClient(timeout=30) as client:
        first_task = asyncio.create_task(client.post(f"{live}/api/v1/agent", json=payload, headers=bearer()))
        await asyncio.sleep(0.5)
        # WHEN the same POST is repeated while it runs, and again after it ended
        live_retry = await client.post(f"{live}/api/v1/agent", json=payload, headers=bearer())
        first = await first_task
        late_retry = await client.post(f"{live}/api/v1/agent", json=payload, headers=bearer())
        # AND the runId is reused with another body
        other = await client.post(
            f"{live}/api/v1/agent", json=body("th-idem", "run-idem", "something else", "u-9"), headers=bearer()
        )
        history = (await client.get(f"{live}/api/v1/threads/th-idem/history", headers=bearer())).json()["items"]
    # THEN all three streams are the same run, the model was called once for it, messages are stored once
    streams = [[f.json() for f in data_frames(parse_sse(r.text))] for r in (first, live_retry, late_retry)]
    assert streams[0] == streams[1] == streams[2]
    asked = [r["messages"][-1]["content"] for r in model_server.requests]
    assert sum("count slowly" in text for text in asked) == 1
    # AND the conflicting body's first request, sent while its admission was writing, went no further (closed
    # when the write refused it): the retries sent none
    assert len(asked) <= 2 and all("count slowly" in text or "something else" in text for text in asked)
    assert [m["id"] for m in history][:1] == ["u-1"] and len(history) == 2
    assert sum(1 for e in streams[0] if e["type"] == "RUN_FINISHED") == 1
    assert other.status_code == 409 and other.json()["error"]["code"] == "run_id_conflict"


async def test_a_second_run_on_a_busy_thread_gets_409_thread_busy(live: str, model_server: ModelServer) -> None:
    model_server.enqueue(slow_text(6, 0.2))
    async with httpx.AsyncClient(timeout=30) as client:
        first = asyncio.create_task(
            client.post(f"{live}/api/v1/agent", json=body("th-busy", "run-a"), headers=bearer())
        )
        await asyncio.sleep(0.5)
        second = await client.post(f"{live}/api/v1/agent", json=body("th-busy", "run-b", "hi", "u-2"), headers=bearer())
        await first
    assert second.status_code == 409 and second.json()["error"]["code"] == "thread_busy"


async def test_cancel_during_a_tool_call_leaves_a_thread_the_model_accepts(
    live: str, model_server: ModelServer, blocking_clock: BlockingClock
) -> None:
    # GIVEN a run whose model says something, then calls a tool that hangs
    model_server.enqueue(
        ScriptedTurn(
            text=["Checking the clock. "],
            tool_calls=[ScriptedToolCall(name="get_current_time", arguments='{"timezone": "UTC"}', id="call-hang")],
        )
    )
    async with httpx.AsyncClient(timeout=30) as client:
        run = asyncio.create_task(
            client.post(f"{live}/api/v1/agent", json=body("th-cancel", "run-c"), headers=bearer())
        )
        for _ in range(200):
            if model_server.served and model_server.served[0].completed:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        # WHEN the user cancels while the tool runs
        cancel = await client.post(f"{live}/api/v1/agent/runs/run-c/cancel", headers=bearer())
        events = [f.json() for f in data_frames(parse_sse((await run).text))]
        # THEN the run ends with RUN_FINISHED outcome cancelled, and the dangling call got a result
        assert cancel.status_code == 200
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "cancelled"}
        results = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
        assert [r["toolCallId"] for r in results] == ["call-hang"]
        assert json.loads(results[0]["content"])["error"]["code"] == "cancelled"
        # AND the next run goes through the real openai client without a provider error
        model_server.enqueue(ScriptedTurn(text=["Sorry about that."]))
        nxt = await client.post(
            f"{live}/api/v1/agent", json=body("th-cancel", "run-d", "never mind", "u-2"), headers=bearer()
        )
    next_events = [f.json() for f in data_frames(parse_sse(nxt.text))]
    assert next_events[-1]["type"] == "RUN_FINISHED"
    sent = model_server.requests[-1]["messages"]
    roles = [m["role"] for m in sent if m["role"] != "system"]
    assert roles == ["user", "assistant", "tool", "user"]
    assistant = next(m for m in sent if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["id"] == "call-hang"
    assert next(m for m in sent if m["role"] == "tool")["tool_call_id"] == "call-hang"


async def test_cancel_of_someone_elses_run_is_not_found(live: str, model_server: ModelServer) -> None:
    model_server.enqueue(ScriptedTurn(text=["hi"]))
    async with httpx.AsyncClient(timeout=30) as client:
        await client.post(f"{live}/api/v1/agent", json=body("th-own", "run-own"), headers=bearer())
        resp = await client.post(f"{live}/api/v1/agent/runs/run-own/cancel", headers=bearer(user="intruder"))
        events = await client.get(f"{live}/api/v1/agent/runs/run-own/events", headers=bearer(tenant="other"))
    assert resp.status_code == 404 and events.status_code == 404

"""Double texting end to end (issue 28): a second message while the first answer streams, with the ``interrupt``
and ``reject`` strategies. uvicorn serving the app, a real redis-server, moto, the real ``openai`` client against the
scripted model server, and the official ``@ag-ui/client`` and ``ag-ui-validate``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shared.wiring import ServiceOverrides, Services
from tests.support.agui_clients import run_js_agent_async, turn_problems, validate_sse
from tests.support.live_app import serve_app
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.settings import make_settings
from tests.support.sse import iter_sse_frames, parse_sse
from tests.support.tokens import bearer

pytestmark = pytest.mark.e2e

TERMINAL = ("RUN_FINISHED", "RUN_ERROR")


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


@pytest.fixture
def live(store: Any, redis_url: str, model_server: ModelServer) -> Iterator[str]:
    settings = make_settings(redis_url=redis_url, llm_base_url=model_server.base_url, llm_api_key="test-key")
    with serve_app(Services(settings, overrides=ServiceOverrides(store=store))) as url:
        yield url


def run_body(thread: str, run: str, mid: str, text: str, strategy: str | None = None) -> dict[str, Any]:
    message = {"id": mid, "role": "user", "content": text}
    body: dict[str, Any] = {"threadId": thread, "runId": run, "messages": [message]}
    if strategy is not None:
        body["forwardedProps"] = {"multitaskStrategy": strategy}
    return body


class FirstRun:
    """The first POST, read in the background: its events, their stream ids and its raw body."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self.ids: list[str] = []
        self.streaming = asyncio.Event()

    async def follow(self, client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> None:
        async with client.stream("POST", f"{url}/api/v1/agent", json=body, headers=bearer()) as resp:
            assert resp.status_code == 200
            async for frame in iter_sse_frames(resp, strict_eof=False):
                if frame.data is None:
                    continue
                self.raw.append(f"id: {frame.id}\ndata: {frame.data}\n\n" if frame.id else f"data: {frame.data}\n\n")
                self.events.append(frame.json())
                self.ids.append(frame.id or "")
                if sum(e["type"] == "TEXT_MESSAGE_CONTENT" for e in self.events) >= 3:
                    self.streaming.set()


def stream_ms(entry_id: str) -> int:
    """The Redis server's time (ms) in a stream entry id (``<ms>-<seq>``)."""
    return int(entry_id.split("-")[0])


def long_answer() -> ScriptedTurn:
    return ScriptedTurn(text=[f"w{i} " for i in range(200)], chunk_delay_s=0.1)


async def test_interrupt_ends_the_first_run_before_the_new_one_starts_and_the_new_run_sees_both_messages(
    live: str, model_server: ModelServer
) -> None:
    model_server.enqueue(long_answer(), ScriptedTurn(text=["Sure, ", "Paris."]))
    first = FirstRun()
    async with httpx.AsyncClient(timeout=60) as client:
        # GIVEN a first answer streaming on the thread
        following = asyncio.create_task(follow_first(first, client, live))
        await asyncio.wait_for(first.streaming.wait(), 10)
        # WHEN a second message arrives with the interrupt strategy
        second = await client.post(
            f"{live}/api/v1/agent",
            json=run_body("th-int", "run-2", "u-2", "actually, the capital of France?", "interrupt"),
            headers=bearer(),
        )
        await following
    # THEN the second POST streamed (never 409) and finished
    assert second.status_code == 200, second.text
    assert validate_sse(second.text).clean
    assert '"RUN_FINISHED"' in second.text
    # AND the first stream ended with the cancel shape, cut short, before the new run started: Redis stream ids are
    # the server's milliseconds, so the first run's terminal entry precedes the second run's RUN_STARTED entry
    assert first.events[-1]["type"] == "RUN_FINISHED" and first.events[-1]["outcome"] == {"type": "cancelled"}
    assert sum(e["type"] == "TEXT_MESSAGE_CONTENT" for e in first.events) < 200
    second_started = next(f for f in parse_sse(second.text) if f.data is not None and f.json()["type"] == "RUN_STARTED")
    assert stream_ms(first.ids[-1]) <= stream_ms(second_started.id or ""), (first.ids[-1], second_started.id)
    assert validate_sse("".join(first.raw)).clean
    # AND the model's request for the new run held both user messages, and the interrupted answer between them
    sent = [m for m in model_server.requests[-1]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"].endswith("hello") and "capital" in sent[2]["content"]
    # AND no tool call is left unanswered in it
    assert not any(m.get("tool_calls") for m in sent)
    # AND the history keeps the interrupted answer, marked partial and ended by the interrupt
    async with httpx.AsyncClient(timeout=30) as client:
        history = (await client.get(f"{live}/api/v1/threads/th-int/history", headers=bearer())).json()["items"]
    partial = [m for m in history if m["role"] == "assistant" and m["content"].startswith("w0")]
    assert len(partial) == 1
    assert partial[0]["partial"] is True and partial[0]["endedBy"] == "interrupted", partial


async def follow_first(first: FirstRun, client: httpx.AsyncClient, url: str) -> None:
    await first.follow(client, url, run_body("th-int", "run-1", "u-1", "hello"))


async def test_the_official_client_interrupts_a_streaming_run_cleanly(live: str, model_server: ModelServer) -> None:
    model_server.enqueue(long_answer(), ScriptedTurn(text=["Interrupted ", "you."]))
    first = FirstRun()
    async with httpx.AsyncClient(timeout=60) as client:
        following = asyncio.create_task(first.follow(client, live, run_body("th-js-int", "run-1", "u-1", "hello")))
        await asyncio.wait_for(first.streaming.wait(), 10)
        # WHEN @ag-ui/client sends the second message with forwardedProps.multitaskStrategy = interrupt
        report = await run_js_agent_async(
            f"{live}/api/v1/agent",
            bearer(),
            "th-js-int",
            [
                {
                    "runId": "run-js-2",
                    "userMessage": {"id": "u-2", "content": "stop, new question"},
                    "forwardedProps": {"multitaskStrategy": "interrupt"},
                }
            ],
        )
        await following
    (turn,) = report["turns"]
    # THEN the client saw a clean run, and ag-ui-validate finds nothing on either stream
    assert turn_problems(turn) == []
    wire = turn["requests"][0]["response"]
    assert wire is not None and wire["status"] == 200
    assert validate_sse(wire["body"]).clean
    assert first.events[-1]["outcome"] == {"type": "cancelled"}
    assert validate_sse("".join(first.raw)).clean


async def test_reject_and_an_unknown_strategy(live: str, model_server: ModelServer) -> None:
    model_server.enqueue(long_answer())
    first = FirstRun()
    async with httpx.AsyncClient(timeout=60) as client:
        following = asyncio.create_task(first.follow(client, live, run_body("th-rej", "run-1", "u-1", "hello")))
        await asyncio.wait_for(first.streaming.wait(), 10)
        # WHEN a second message says reject (the shipped default), or a strategy that does not exist
        rejected = await client.post(
            f"{live}/api/v1/agent", json=run_body("th-rej", "run-2", "u-2", "again", "reject"), headers=bearer()
        )
        unknown = await client.post(
            f"{live}/api/v1/agent", json=run_body("th-rej", "run-3", "u-3", "again", "rollback"), headers=bearer()
        )
        default = await client.post(
            f"{live}/api/v1/agent", json=run_body("th-rej", "run-4", "u-4", "again"), headers=bearer()
        )
        await client.post(f"{live}/api/v1/agent/runs/run-1/cancel", headers=bearer())
        await following
    # THEN reject (and the profile's default) answer 409 thread_busy, the unknown strategy 422, the first run goes on
    assert rejected.status_code == 409 and rejected.json()["error"]["code"] == "thread_busy"
    assert default.status_code == 409 and default.json()["error"]["code"] == "thread_busy"
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "invalid_request"
    assert unknown.json()["error"]["details"][0]["loc"] == ["body", "forwardedProps", "multitaskStrategy"]
    assert first.events[-1]["outcome"] == {"type": "cancelled"}


async def test_the_official_client_is_refused_cleanly_by_reject(live: str, model_server: ModelServer) -> None:
    model_server.enqueue(long_answer())
    first = FirstRun()
    async with httpx.AsyncClient(timeout=60) as client:
        following = asyncio.create_task(first.follow(client, live, run_body("th-js-rej", "run-1", "u-1", "hello")))
        await asyncio.wait_for(first.streaming.wait(), 10)
        # WHEN @ag-ui/client sends a second message with forwardedProps.multitaskStrategy = reject
        report = await run_js_agent_async(
            f"{live}/api/v1/agent",
            bearer(),
            "th-js-rej",
            [
                {
                    "runId": "run-js-2",
                    "userMessage": {"id": "u-2", "content": "again"},
                    "forwardedProps": {"multitaskStrategy": "reject"},
                }
            ],
        )
        await client.post(f"{live}/api/v1/agent/runs/run-1/cancel", headers=bearer())
        await following
    (turn,) = report["turns"]
    # THEN the client's run is refused with the 409 thread_busy answer, and the first stream stays valid
    wire = turn["requests"][0]["response"]
    assert wire is not None and wire["status"] == 409, wire
    assert json.loads(wire["body"])["error"]["code"] == "thread_busy"
    assert turn["error"] is not None or turn["runFailed"], turn
    assert validate_sse("".join(first.raw)).clean

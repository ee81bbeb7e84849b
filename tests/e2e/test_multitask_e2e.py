"""Double texting end to end (issue 28): a second message while the first answer streams, with the ``interrupt``
and ``reject`` strategies. uvicorn serving the app, a real redis-server, moto, the real ``openai`` client against the
scripted model server, and the official ``@ag-ui/client`` and ``ag-ui-validate``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.agui_clients import validate_sse
from tests.support.double_texting import (
    clean_second_run,
    first_answer_streaming,
    js_client_sends,
    long_answer,
    run_body,
)
from tests.support.live_app import serve_with_model
from tests.support.model_server import (
    ModelServer,
    ScriptedTurn,
    model_server_fixture,  # noqa: F401  (the fixture)
)
from tests.support.sse import parse_sse
from tests.support.tokens import bearer

pytestmark = pytest.mark.e2e


@pytest.fixture
def live(store: Any, redis_url: str, model_server: ModelServer) -> Iterator[str]:
    with serve_with_model(store, redis_url, model_server) as url:
        yield url


def stream_ms(entry_id: str) -> int:
    """The Redis server's time (ms) in a stream entry id (``<ms>-<seq>``)."""
    return int(entry_id.split("-")[0])


async def test_interrupt_ends_the_first_run_before_the_new_one_starts_and_the_new_run_sees_both_messages(
    live: str, model_server: ModelServer
) -> None:
    model_server.enqueue(long_answer(200), ScriptedTurn(text=["Sure, ", "Paris."]))
    async with httpx.AsyncClient(timeout=60) as client:
        # GIVEN a first answer streaming on the thread
        first, following = await first_answer_streaming(client, live, "th-int", "run-1")
        # WHEN a second message arrives with the interrupt strategy
        second = await client.post(
            f"{live}/api/v1/agent",
            json=run_body("th-int", "run-2", "actually, the capital of France?", "interrupt"),
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
    assert validate_sse(first.raw).clean
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


async def test_the_official_client_interrupts_a_streaming_run_cleanly(live: str, model_server: ModelServer) -> None:
    model_server.enqueue(long_answer(200), ScriptedTurn(text=["Interrupted ", "you."]))
    async with httpx.AsyncClient(timeout=60) as client:
        first, following = await first_answer_streaming(client, live, "th-js-int", "run-1")
        # WHEN @ag-ui/client sends the second message with forwardedProps.multitaskStrategy = interrupt
        report = await js_client_sends(live, "th-js-int", "stop, new question", "interrupt")
        await following
    (turn,) = report["turns"]
    # THEN the client saw a clean run, and ag-ui-validate finds nothing on either stream
    clean_second_run(turn)
    assert first.events[-1]["outcome"] == {"type": "cancelled"}
    assert validate_sse(first.raw).clean


async def test_reject_and_an_unknown_strategy(live: str, model_server: ModelServer) -> None:
    model_server.enqueue(long_answer(200))
    async with httpx.AsyncClient(timeout=60) as client:
        first, following = await first_answer_streaming(client, live, "th-rej", "run-1")
        # WHEN a second message says reject (the shipped default), or a strategy that does not exist
        rejected = await client.post(
            f"{live}/api/v1/agent", json=run_body("th-rej", "run-2", "again", "reject"), headers=bearer()
        )
        unknown = await client.post(
            f"{live}/api/v1/agent", json=run_body("th-rej", "run-3", "again", "rollback"), headers=bearer()
        )
        default = await client.post(f"{live}/api/v1/agent", json=run_body("th-rej", "run-4", "again"), headers=bearer())
        await client.post(f"{live}/api/v1/agent/runs/run-1/cancel", headers=bearer())
        await following
    # THEN reject (and the profile's default) answer 409 thread_busy, the unknown strategy 422, the first run goes on
    assert rejected.status_code == 409 and rejected.json()["error"]["code"] == "thread_busy"
    assert default.status_code == 409 and default.json()["error"]["code"] == "thread_busy"
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "invalid_request"
    assert unknown.json()["error"]["details"][0]["loc"] == ["body", "forwardedProps", "multitaskStrategy"]
    assert first.events[-1]["outcome"] == {"type": "cancelled"}


async def test_the_official_client_is_refused_cleanly_by_reject(live: str, model_server: ModelServer) -> None:
    model_server.enqueue(long_answer(200))
    async with httpx.AsyncClient(timeout=60) as client:
        first, following = await first_answer_streaming(client, live, "th-js-rej", "run-1")
        # WHEN @ag-ui/client sends a second message with forwardedProps.multitaskStrategy = reject
        report = await js_client_sends(live, "th-js-rej", "again", "reject")
        await client.post(f"{live}/api/v1/agent/runs/run-1/cancel", headers=bearer())
        await following
    (turn,) = report["turns"]
    # THEN the client's run is refused with the 409 thread_busy answer, and the first stream stays valid
    wire = turn["requests"][0]["response"]
    assert wire is not None and wire["status"] == 409, wire
    assert json.loads(wire["body"])["error"]["code"] == "thread_busy"
    assert turn["error"] is not None or turn["runFailed"], turn
    assert validate_sse(first.raw).clean

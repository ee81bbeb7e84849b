"""The ``enqueue`` multitask strategy end to end (issue 28): messages sent while an answer streams wait their turn,
in order, each answered once; beyond the queue's depth, ``409 queue_full``; a queued run whose client left still
runs and can be followed. uvicorn serving the app, a real redis-server, moto, the real ``openai`` client against
the scripted model server, and the official ``@ag-ui/client`` and ``ag-ui-validate``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shared.runs.deadline import LAMBDA_CONTEXT_HEADER
from shared.runs.queueing import START_RESERVE_S
from tests.support.agui_clients import validate_sse
from tests.support.double_texting import (
    Following,
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
from tests.support.sse import iter_sse_frames
from tests.support.streams import TERMINAL, assert_well_formed_run, events_of
from tests.support.tokens import bearer

pytestmark = pytest.mark.e2e


@pytest.fixture
def live(store: Any, redis_url: str, model_server: ModelServer) -> Iterator[str]:
    with serve_with_model(store, redis_url, model_server, sse_ping_interval_s=0.5) as url:
        yield url


def queued_body(thread: str, run: str, text: str) -> dict[str, Any]:
    return run_body(thread, run, text, "enqueue")


def last_user_text(request: dict[str, Any]) -> str:
    return str([m for m in request["messages"] if m["role"] == "user"][-1]["content"])


async def test_three_queued_messages_are_answered_in_order_once_each_and_a_fourth_is_refused(
    live: str, model_server: ModelServer
) -> None:
    model_server.enqueue(long_answer(30), *(ScriptedTurn(text=[f"answer {i}."]) for i in (1, 2, 3)))
    queued = [Following() for _ in range(3)]
    async with httpx.AsyncClient(timeout=60) as client:
        # GIVEN an answer streaming on the thread
        first, first_following = await first_answer_streaming(client, live, "th-q", "run-0")
        following = [first_following]
        # WHEN three messages are sent with the enqueue strategy, one after the other
        for i, q in enumerate(queued, start=1):
            following.append(
                asyncio.create_task(q.post(client, live, queued_body("th-q", f"run-{i}", f"question {i}")))
            )
            await asyncio.wait_for(q.pinged.wait(), 10)
        # AND a fourth, beyond the queue's depth (3)
        fourth = await client.post(
            f"{live}/api/v1/agent", json=queued_body("th-q", "run-4", "one more"), headers=bearer()
        )
        await asyncio.gather(*following)
        history = (await client.get(f"{live}/api/v1/threads/th-q/history", headers=bearer())).json()["items"]
    # THEN the fourth is refused with queue_full, and nothing of it is stored
    assert fourth.status_code == 409 and fourth.json()["error"]["code"] == "queue_full", fourth.text
    assert all(m["content"] != "one more" for m in history)
    # AND each queued POST streamed (pings while waiting, then its run), one run each, clean
    for i, q in enumerate(queued, start=1):
        assert q.status == 200
        terminal = assert_well_formed_run(q.events)
        assert terminal["type"] == "RUN_FINISHED" and terminal["runId"] == f"run-{i}", q.events
        assert validate_sse(q.raw).clean
    assert validate_sse(first.raw).clean
    # AND the model answered them in the order they were sent, each exactly once, after the first run
    asked = [last_user_text(r) for r in model_server.requests]
    assert asked == ["hello", "question 1", "question 2", "question 3"], asked
    texts = [(m["role"], m["content"]) for m in history]
    assert [t for t in texts if t[0] == "user"] == [
        ("user", "hello"),
        ("user", "question 1"),
        ("user", "question 2"),
        ("user", "question 3"),
    ]
    assert [c for r, c in texts if r == "assistant"][1:] == ["answer 1.", "answer 2.", "answer 3."]


async def test_a_queued_run_whose_client_left_still_runs_and_can_be_followed(
    live: str, model_server: ModelServer
) -> None:
    model_server.enqueue(long_answer(30), ScriptedTurn(text=["still ", "answered."]))
    async with httpx.AsyncClient(timeout=60) as client:
        _, following = await first_answer_streaming(client, live, "th-gone", "run-0")
        # GIVEN a queued message whose client leaves while it waits
        async with client.stream(
            "POST", f"{live}/api/v1/agent", json=queued_body("th-gone", "run-q", "are you there?"), headers=bearer()
        ) as resp:
            assert resp.status_code == 200
            async for frame in iter_sse_frames(resp, strict_eof=False):
                assert frame.data is None  # only pings while it waits
                break
        # WHEN a reader follows it with GET /runs/{runId}/events while it still waits, and the first run ends
        reading = asyncio.create_task(follow_run(client, live, "run-q", queued=True))
        await following
        # THEN the queued run runs anyway, and the reader gets its events
        followed = await reading
    assert followed[-1]["type"] == "RUN_FINISHED", followed
    assert_well_formed_run(followed)
    assert "".join(e.get("delta", "") for e in followed if e["type"] == "TEXT_MESSAGE_CONTENT") == "still answered."


async def follow_run(client: httpx.AsyncClient, url: str, run_id: str, *, queued: bool = False) -> list[dict[str, Any]]:
    """The run's events through GET /runs/{runId}/events; ``queued``: the run has not started yet, and the reader
    is answered at once anyway (pings until it starts)."""
    async with client.stream("GET", f"{url}/api/v1/agent/runs/{run_id}/events", headers=bearer()) as resp:
        assert resp.status_code == 200
        raw = ""
        async for chunk in resp.aiter_text():
            raw += chunk
    if queued:
        assert raw.startswith(": ping"), raw[:200]
    events = events_of(raw)
    assert events and events[-1]["type"] in TERMINAL
    return events


async def test_the_official_client_queues_behind_a_streaming_run_cleanly(live: str, model_server: ModelServer) -> None:
    model_server.enqueue(long_answer(30), ScriptedTurn(text=["Queued ", "answer."]))
    async with httpx.AsyncClient(timeout=60) as client:
        first, following = await first_answer_streaming(client, live, "th-js-q", "run-1")
        # WHEN @ag-ui/client sends the second message with forwardedProps.multitaskStrategy = enqueue
        report = await js_client_sends(live, "th-js-q", "and then?", "enqueue")
        await following
    (turn,) = report["turns"]
    # THEN the client saw a clean run after the first one finished, and ag-ui-validate finds nothing on either stream
    body = clean_second_run(turn)
    assert "Queued answer." in "".join(e.get("delta", "") for e in events_of(body))
    assert first.events[-1]["type"] == "RUN_FINISHED" and first.events[-1]["outcome"] == {"type": "success"}
    assert validate_sse(first.raw).clean


async def test_a_wait_that_would_outlast_the_deadline_ends_the_stream_and_the_run_still_happens(
    live: str, model_server: ModelServer
) -> None:
    model_server.enqueue(long_answer(30), ScriptedTurn(text=["handed ", "over."]))
    async with httpx.AsyncClient(timeout=60) as client:
        _, following = await first_answer_streaming(client, live, "th-late", "run-0")
        # GIVEN a queued POST whose invocation ends (deadline) before the first run does: it may start its run only
        # until START_RESERVE_S before its deadline, which is already now
        deadline_ms = int((time.time() + START_RESERVE_S + 1) * 1000)
        headers = {**bearer(), LAMBDA_CONTEXT_HEADER: json.dumps({"deadline": deadline_ms})}
        queued = await client.post(
            f"{live}/api/v1/agent", json=queued_body("th-late", "run-late", "later?"), headers=headers
        )
        # THEN its stream ends without a terminal event (the client follows GET /runs/{runId}/events)
        assert queued.status_code == 200
        assert events_of(queued.text) == [], queued.text
        # WHEN the first run ends, its request hands the thread over to the queued run
        await following
        followed = await follow_run(client, live, "run-late")
    # THEN the queued run ran, and its events can be followed
    assert_well_formed_run(followed)
    assert followed[-1]["type"] == "RUN_FINISHED"
    assert "".join(e.get("delta", "") for e in followed if e["type"] == "TEXT_MESSAGE_CONTENT") == "handed over."


@pytest.fixture
def one_run_each(store: Any, redis_url: str, model_server: ModelServer) -> Iterator[str]:
    """The app with a per-user limit of one concurrent run."""
    limits = json.dumps({"user": {"concurrentRuns": 1}})
    with serve_with_model(store, redis_url, model_server, sse_ping_interval_s=0.5, limits=limits) as url:
        yield url


async def test_a_queued_run_holds_no_concurrency_slot_while_it_waits(
    one_run_each: str, model_server: ModelServer
) -> None:
    model_server.enqueue(long_answer(30), ScriptedTurn(text=["my ", "turn."]))
    queued = Following()
    async with httpx.AsyncClient(timeout=60) as client:
        # GIVEN a user allowed one run at a time, with an answer streaming
        first, first_following = await first_answer_streaming(client, one_run_each, "th-slot", "run-0", "hi")
        following = [first_following]
        # WHEN the user queues a message on the thread
        following.append(
            asyncio.create_task(queued.post(client, one_run_each, queued_body("th-slot", "run-q", "next one")))
        )
        await asyncio.wait_for(queued.pinged.wait(), 10)
        # AND a run on another thread is refused meanwhile: the one slot is the first run's
        other = await client.post(
            f"{one_run_each}/api/v1/agent", json=run_body("th-other", "run-x", "elsewhere"), headers=bearer()
        )
        # THEN the queued message was accepted while the slot was taken (waiting holds none), and ran once it was free
        assert other.status_code == 429 and other.json()["error"]["code"] == "too_many_runs", other.text
        assert queued.status == 200
        await asyncio.gather(*following)
    terminal = assert_well_formed_run(queued.events)
    assert terminal["type"] == "RUN_FINISHED" and terminal["runId"] == "run-q", queued.events
    assert first.events[-1]["type"] == "RUN_FINISHED"

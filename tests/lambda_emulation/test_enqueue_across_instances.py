"""The ``enqueue`` multitask strategy across two instances (issue 28): messages queued through A and B while an
answer streams from A are answered in the order they were sent, each once, because the order is the store's."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.support.lambda_instance import Instance
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.streams import assert_well_formed_run, body, events_of
from tests.support.tokens import bearer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def queued_body(run: str, text: str) -> dict[str, Any]:
    return {**body("th-q", run, text, f"m-{run}"), "forwardedProps": {"multitaskStrategy": "enqueue"}}


async def post_and_read(client: httpx.AsyncClient, url: str, payload: dict[str, Any], waiting: asyncio.Event) -> str:
    raw = ""
    async with client.stream("POST", f"{url}/api/v1/agent", json=payload, headers=bearer()) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for chunk in resp.aiter_text():
            raw += chunk
            if ": ping" in raw or '"RUN_STARTED"' in raw:
                waiting.set()
    return raw


async def test_messages_queued_through_two_instances_are_answered_in_the_order_sent(
    instances: tuple[Instance, Instance], model_server: ModelServer
) -> None:
    a, b = instances
    model_server.enqueue(
        ScriptedTurn(text=[f"w{i} " for i in range(30)], chunk_delay_s=0.1),
        *(ScriptedTurn(text=[f"answer {i}."]) for i in (1, 2, 3)),
    )
    async with httpx.AsyncClient(timeout=90) as client:
        # GIVEN an answer streaming from A
        started = asyncio.Event()
        first = asyncio.create_task(post_and_read(client, a.url, body("th-q", "run-0"), started))
        await asyncio.wait_for(started.wait(), 20)
        # WHEN three messages are queued, through B, A and B in turn
        queued: list[asyncio.Task[str]] = []
        for i, instance in enumerate((b, a, b), start=1):
            waiting = asyncio.Event()
            payload = queued_body(f"run-{i}", f"question {i}")
            queued.append(asyncio.create_task(post_and_read(client, instance.url, payload, waiting)))
            await asyncio.wait_for(waiting.wait(), 20)
        await first
        streams = [await q for q in queued]
    # THEN each is answered once, in the order sent, whichever instance queued it
    for i, raw in enumerate(streams, start=1):
        terminal = assert_well_formed_run(events_of(raw))
        assert terminal["type"] == "RUN_FINISHED" and terminal["runId"] == f"run-{i}", raw
    asked = [[m for m in r["messages"] if m["role"] == "user"][-1]["content"] for r in model_server.requests]
    assert asked == ["hello", "question 1", "question 2", "question 3"], asked

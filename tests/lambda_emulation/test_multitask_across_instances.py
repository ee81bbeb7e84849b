"""The ``interrupt`` multitask strategy across two instances (issue 28): a second message through instance B stops
the run streaming from instance A through the cross-instance cancel path within a second, then B runs the new
message with both user messages in the model's window, and never answers 409."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.support.lambda_instance import Instance
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.sse import iter_sse_frames
from tests.support.streams import TERMINAL, body
from tests.support.tokens import bearer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


async def test_a_second_message_with_interrupt_through_b_stops_a_run_on_a_within_a_second(
    instances: tuple[Instance, Instance], model_server: ModelServer
) -> None:
    a, b = instances
    # GIVEN a long answer streaming from A
    model_server.enqueue(
        ScriptedTurn(text=[f"w{i} " for i in range(200)], chunk_delay_s=0.1), ScriptedTurn(text=["Paris."])
    )
    events: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=60) as client:
        async with client.stream("POST", f"{a.url}/api/v1/agent", json=body("th-int", "run-1"), headers=bearer()) as r:
            posted_at: float | None = None
            async for frame in iter_sse_frames(r, strict_eof=False):
                if frame.data is None:
                    continue
                events.append(frame.json())
                if events[-1]["type"] in TERMINAL:
                    break
                if posted_at is None and len(events) > 5:
                    # WHEN a second message reaches B with the interrupt strategy (B answers once A let go)
                    posted_at = time.monotonic()
                    second_body = {**body("th-int", "run-2", "capital of France?", "u-2")}
                    second_body["forwardedProps"] = {"multitaskStrategy": "interrupt"}
                    second = asyncio.create_task(
                        client.post(f"{b.url}/api/v1/agent", json=second_body, headers=bearer())
                    )
            first_ended_after = time.monotonic() - (posted_at or 0)
        answer = await second
    # THEN A's stream ended as cancelled within a second of B's POST
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "cancelled"}
    assert first_ended_after < 1.0, first_ended_after
    # AND B streamed the new run without a 409, its model request holding both user messages
    assert answer.status_code == 200, answer.text
    assert '"RUN_FINISHED"' in answer.text
    sent = [m for m in model_server.requests[-1]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    # AND the interrupted answer stays in history marked as interrupted (the reason crossed with the cancel signal)
    async with httpx.AsyncClient(timeout=30) as client:
        history = (await client.get(f"{b.url}/api/v1/threads/th-int/history", headers=bearer())).json()["items"]
    partial = [m for m in history if m["role"] == "assistant" and m.get("partial")]
    assert [m.get("endedBy") for m in partial] == ["interrupted"], partial

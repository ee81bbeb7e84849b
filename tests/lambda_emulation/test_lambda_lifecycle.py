"""The run lifecycle as Lambda runs it: an environment is frozen the moment its response ends.

Two instances of the streaming function are started by ``run.sh`` on one moto server and one redis-server. Instance
A is frozen (``SIGSTOP``) as soon as its client has read the terminal event, or right after its client went away;
everything is then checked through instance B and the shared table. With the run service's settle order, lease and
cancel signal reverted (``LAMBDA_EMULATION_SRC`` set to a checkout of the commit before them), each scenario fails.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.models import Identity, RunStatus
from tests.support.lambda_instance import Instance, leave_mid_tool_call, slow_tool_call_turn
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.sse import iter_sse_frames
from tests.support.streams import TERMINAL, assert_well_formed_run, body, events_of
from tests.support.tokens import bearer

from .leases import LEASE_S

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

USER = Identity(tenant_id="tenant-1", user_id="user-1")


async def post_until_terminal(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a run and read its events up to the terminal one, the moment the response ends for the client."""
    events: list[dict[str, Any]] = []
    async with client.stream("POST", f"{url}/api/v1/agent", json=payload, headers=bearer()) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for frame in iter_sse_frames(resp, strict_eof=False):
            if frame.data is None:
                continue
            events.append(frame.json())
            if events[-1]["type"] in TERMINAL:
                return events
    return events


async def test_freeze_after_the_response_leaves_nothing_undone(
    instances: tuple[Instance, Instance], model_server: ModelServer, shared_store: DynamoDBStore
) -> None:
    a, b = instances
    model_server.enqueue(ScriptedTurn(text=["All ", "done."]))
    async with httpx.AsyncClient(timeout=30) as client:
        # GIVEN a run on instance A, whose environment is frozen the moment its client has the terminal event
        events = await post_until_terminal(client, a.url, body("th-freeze", "run-1"))
        a.freeze()
        assert events[-1]["type"] == "RUN_FINISHED"
        # THEN the ledger says succeeded and the thread is free
        run = await shared_store.runs.get_run(USER.tenant_id, "run-1")
        assert run is not None and run.status is RunStatus.SUCCEEDED
        assert (await shared_store.threads.get_thread(USER, "th-freeze")).active_run_id is None
        # AND a second message through instance B streams RUN_FINISHED
        model_server.enqueue(ScriptedTurn(text=["Again."]))
        second = await client.post(
            f"{b.url}/api/v1/agent", json=body("th-freeze", "run-2", "again", "u-2"), headers=bearer()
        )
    assert second.status_code == 200, second.text
    assert assert_well_formed_run(events_of(second.text))["type"] == "RUN_FINISHED"


async def test_disconnect_mid_run_then_freeze_the_next_message_takes_the_thread_over(
    instances: tuple[Instance, Instance], model_server: ModelServer, shared_store: DynamoDBStore
) -> None:
    a, b = instances
    # GIVEN a run on A whose model is slowly calling a tool
    model_server.enqueue(slow_tool_call_turn())
    async with httpx.AsyncClient(timeout=30) as client:
        # WHEN its client disconnects mid-run (the tool call half streamed) and then A is frozen
        await leave_mid_tool_call(client, a.url, body("th-dc", "run-1"))
        a.freeze()
        frozen_at = time.monotonic()
        # THEN within the lease plus 5 s a new message through B is admitted (409 thread_busy until the lease ends)
        model_server.enqueue(ScriptedTurn(text=["It ", "is ", "noon."]))
        statuses: list[int] = []
        while True:
            async with client.stream(
                "POST", f"{b.url}/api/v1/agent", json=body("th-dc", "run-2", "well?", "u-2"), headers=bearer()
            ) as resp:
                admitted_after = time.monotonic() - frozen_at
                text = (await resp.aread()).decode()
            statuses.append(resp.status_code)
            if resp.status_code != 409 or admitted_after > LEASE_S + 5:
                break
            await asyncio.sleep(0.5)
    assert resp.status_code == 200, (statuses, text)
    assert admitted_after <= LEASE_S + 5, (statuses, admitted_after)
    # AND it succeeds
    assert assert_well_formed_run(events_of(text))["type"] == "RUN_FINISHED"
    # AND the old run is closed, with a terminal event on its stream
    old = await shared_store.runs.get_run(USER.tenant_id, "run-1")
    assert old is not None and old.status is RunStatus.FAILED
    async with httpx.AsyncClient(timeout=30) as client:
        replay = await client.get(f"{b.url}/api/v1/agent/runs/run-1/events", headers=bearer())
    assert assert_well_formed_run(events_of(replay.text))["type"] == "RUN_ERROR"
    # AND the history sent to the model is well-formed: the dangling call has a result before the next user turn
    sent = [m for m in model_server.requests[-1]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[1]["tool_calls"][0]["id"] == "call-1" and sent[2]["tool_call_id"] == "call-1"


async def test_cancel_through_b_stops_a_run_on_a_within_a_second(
    instances: tuple[Instance, Instance], model_server: ModelServer
) -> None:
    a, b = instances
    delays: list[float] = []
    async with httpx.AsyncClient(timeout=60) as client:
        for attempt in range(3):
            # GIVEN a long run on A, streaming
            model_server.enqueue(ScriptedTurn(text=[f"w{i} " for i in range(200)], chunk_delay_s=0.1))
            run_id = f"run-{attempt}"
            events: list[dict[str, Any]] = []
            async with client.stream(
                "POST", f"{a.url}/api/v1/agent", json=body(f"th-cancel-{attempt}", run_id), headers=bearer()
            ) as resp:
                cancelled_at: float | None = None
                async for frame in iter_sse_frames(resp, strict_eof=False):
                    if frame.data is None:
                        continue
                    events.append(frame.json())
                    if events[-1]["type"] in TERMINAL:
                        break
                    if cancelled_at is None and events[-1]["type"] == "TEXT_MESSAGE_CONTENT" and len(events) > 5:
                        # WHEN the user cancels through B
                        answer = await client.post(f"{b.url}/api/v1/agent/runs/{run_id}/cancel", headers=bearer())
                        assert answer.status_code == 200
                        cancelled_at = time.monotonic()
                assert cancelled_at is not None
                delays.append(time.monotonic() - cancelled_at)
            # THEN the run on A ends as cancelled
            assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "cancelled"}
    # AND each time within a second of the cancel
    assert max(delays) < 1.0, delays

"""A reader never waits on a dead run (issue 28, point 4).

A run on instance A loses its client mid-run and A is frozen (``SIGSTOP``), as Lambda freezes an environment whose
response ended. A reconnect through instance B (``GET /runs/{runId}/events`` with Last-Event-ID) must not get only
pings: once the run's lease has expired, the reader ends the run with the takeover's repair, receives one terminal
``RUN_ERROR`` ``run_failed`` within the lease plus 5 s of the freeze, and its stream ends.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.models import Identity, RunStatus
from tests.lambda_emulation.leases import LEASE_S
from tests.support.lambda_instance import Instance, leave_mid_tool_call, slow_tool_call_turn
from tests.support.model_server import ModelServer
from tests.support.sse import iter_sse_frames
from tests.support.streams import TERMINAL, body
from tests.support.tokens import bearer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

USER = Identity(tenant_id="tenant-1", user_id="user-1")


async def test_a_reconnect_to_a_frozen_run_ends_it_within_the_lease_plus_5_s(
    instances: tuple[Instance, Instance], model_server: ModelServer, shared_store: DynamoDBStore
) -> None:
    a, b = instances
    # GIVEN a run on A whose model is slowly calling a tool
    model_server.enqueue(slow_tool_call_turn())
    async with httpx.AsyncClient(timeout=60) as client:
        # WHEN its client disconnects mid-run (the tool call half streamed) and A is frozen
        last_id = await leave_mid_tool_call(client, a.url, body("th-dead", "run-1"))
        a.freeze()
        frozen_at = time.monotonic()
        # AND the client reconnects through B with its Last-Event-ID
        resumed: list[dict[str, Any]] = []
        pings = 0
        async with client.stream(
            "GET",
            f"{b.url}/api/v1/agent/runs/run-1/events",
            headers={**bearer(), "Last-Event-ID": last_id},
        ) as resp:
            assert resp.status_code == 200
            async for frame in iter_sse_frames(resp, strict_eof=False):
                if time.monotonic() - frozen_at > LEASE_S + 10:
                    break  # a reader left waiting on the dead run: the assertions below say so
                if frame.data is None:
                    pings += 1
                    continue
                resumed.append(frame.json())
            ended_after = time.monotonic() - frozen_at
    # THEN the reader's stream ended by itself, after exactly one terminal event: RUN_ERROR run_failed
    terminals = [e for e in resumed if e["type"] in TERMINAL]
    assert len(terminals) == 1 and resumed[-1] is terminals[0], [e["type"] for e in resumed]
    assert terminals[0]["type"] == "RUN_ERROR" and terminals[0]["code"] == "run_failed"
    # AND within the lease plus 5 s of the freeze (the reader waited through pings until then)
    assert ended_after <= LEASE_S + 5, ended_after
    assert pings >= 1
    # AND the stream was closed as the takeover closes it: the half-streamed call ended and answered
    types = [e["type"] for e in resumed]
    assert "TOOL_CALL_END" in types and "TOOL_CALL_RESULT" in types, types
    # AND the run ended in the ledger with the thread released
    run = await shared_store.runs.get_run(USER.tenant_id, "run-1")
    assert run is not None and run.status is RunStatus.FAILED and run.error_code == "run_failed"
    assert (await shared_store.threads.get_thread(USER, "th-dead")).active_run_id is None

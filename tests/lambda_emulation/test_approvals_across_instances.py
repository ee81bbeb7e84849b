"""Approval of a server tool across two instances (issue 28): the interrupt is raised by a run on instance A, the
thread is free while the person decides (no run holds it, A's stream is over), and the resume through instance B
runs the approved call and the model's answer there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools.local.appconfig_standin import ExtensionStandIn
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.in_memory.config import InMemoryConfigSource
from shared.models import Identity
from tests.support.lambda_instance import Instance, function_env, started
from tests.support.model_server import ModelServer, ScriptedToolCall, ScriptedTurn
from tests.support.streams import body, events_of
from tests.support.tokens import bearer

from .leases import LEASED

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

APPROVALS_PROFILE = {
    "name": "chat_approvals_test",
    "executor": "worker",
    "model": {"name": "qwen3.5-30b-a3b", "thinking": "off"},
    "tool_policy": {"allowlist": ["get_current_time", "units_convert"], "require_approval": ["units_*"]},
}
DOCUMENT = {
    "profiles": [APPROVALS_PROFILE],
    "rollout": {"tenants": {"tenant-1": {"chat_default": "chat_approvals_test"}}},
}


@pytest.fixture
def approval_instances(
    dynamodb_url: str, redis_url: str, model_server: ModelServer, tmp_path: Path
) -> Iterator[tuple[Instance, Instance]]:
    """Instances A and B as the template configures them, with the units_convert plugin and a runtime configuration
    (the AppConfig extension's stand-in) that moves tenant-1's chats to a profile requiring approval for it."""
    standin = ExtensionStandIn(InMemoryConfigSource(DOCUMENT)).start()
    env = {
        **function_env(dynamodb_url, redis_url, model_server.base_url), **LEASED,
        "TOOL_PLUGINS": "tool_plugins.units_convert:TOOL",
        "APPCONFIG_APPLICATION": "agent", "APPCONFIG_ENVIRONMENT": "local", "APPCONFIG_PROFILE": "runtime",
        "APPCONFIG_EXTENSION_URL": standin.url,
    }
    try:
        with started(env, tmp_path) as (a, b):
            yield a, b
    finally:
        standin.stop()


async def test_an_interrupt_raised_on_a_is_resumed_through_b(
    approval_instances: tuple[Instance, Instance], model_server: ModelServer, shared_store: DynamoDBStore
) -> None:
    a, b = approval_instances
    # GIVEN a model that converts units (a tool that needs approval in this tenant's profile), then answers
    call = ScriptedToolCall(name="units_convert", arguments='{"value": 5, "from_unit": "km", "to_unit": "mi"}',
                            id="call_u1")
    model_server.enqueue(ScriptedTurn(tool_calls=[call]), ScriptedTurn(text=["About 3.1 miles."]))
    async with httpx.AsyncClient(timeout=60) as client:
        # WHEN the user asks through A
        first = await client.post(f"{a.url}/api/v1/agent", json=body("th-ap", "run-1", "5 km in miles?"),
                                  headers=bearer())
        # THEN A's run ended with the interrupt, and nothing holds the thread while the person decides
        finished = events_of(first.text)[-1]
        assert finished["type"] == "RUN_FINISHED" and finished["outcome"]["type"] == "interrupt", first.text
        (interrupt,) = finished["outcome"]["interrupts"]
        assert interrupt["toolCallId"] == "call_u1"
        thread = await shared_store.threads.get_thread(Identity(tenant_id="tenant-1", user_id="user-1"), "th-ap")
        assert thread.active_run_id is None
        run = await shared_store.runs.get_run("tenant-1", "run-1")
        assert run is not None and run.status.is_terminal
        # WHEN the user approves it through B
        resume = {**body("th-ap", "run-2", "5 km in miles?"),
                  "resume": [{"interruptId": interrupt["id"], "status": "resolved"}]}
        second = await client.post(f"{b.url}/api/v1/agent", json=resume, headers=bearer())
        # AND replays the same resume through A
        replay = await client.post(f"{a.url}/api/v1/agent", json={**resume, "runId": "run-3"}, headers=bearer())
    # THEN B ran the call and the model answered with its result, in that run
    events = events_of(second.text)
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "call_u1" and json.loads(result["content"])["result"] == pytest.approx(3.106856)
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    sent = [m for m in model_server.requests[-1]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert json.loads(sent[-1]["content"])["result"] == pytest.approx(3.106856)
    # AND the replay through A is refused: the interrupt was answered on B
    assert (replay.status_code, replay.json()["error"]["code"]) == (422, "interrupt_already_answered")

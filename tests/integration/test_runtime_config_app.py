"""Runtime configuration on a running app: the ASGI app on moto and a real redis-server, its profiles read through
the AppConfig extension adapter from a stand-in of the extension on loopback, polled every 0.2 s."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devtools.local.appconfig_standin import ExtensionStandIn
from shared.adapters.in_memory.config import InMemoryConfigSource
from shared.runtime_config import LiveProfiles
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.sse import parse_sse
from tests.support.tokens import bearer

POLL_S = 0.2
TRIAL = {
    "name": "chat_trial",
    "executor": "worker",
    "model": {"name": "qwen3.5-plus", "thinking": "off"},
    "tool_policy": {"allowlist": ["get_current_time"]},
}
EVERYONE_ON_TRIAL = {
    "profiles": [TRIAL],
    "rollout": {"ramps": [{"id": "trial-1", "from": "chat_default", "to": "chat_trial", "percent": 100}]},
}


@pytest.fixture
def extension() -> Iterator[ExtensionStandIn]:
    standin = ExtensionStandIn(InMemoryConfigSource("{}"), application="agent", environment="test").start()
    yield standin
    standin.stop()


def deployments(extension: ExtensionStandIn) -> InMemoryConfigSource:
    source = extension.source
    assert isinstance(source, InMemoryConfigSource)
    return source


async def run_profile(client: httpx.AsyncClient, run_id: str) -> str:
    """Run the agent once; the profile RUN_STARTED names."""
    body = {"threadId": f"th-{run_id}", "runId": run_id, "messages": [{"id": "m1", "role": "user", "content": "hi"}]}
    response = await client.post("/api/v1/agent", json=body, headers=bearer())
    frames = [f.json() for f in parse_sse(response.text) if not f.is_comment_only]
    assert frames[-1]["type"] == "RUN_FINISHED", frames[-1]
    return str(frames[0]["metadata"]["executionProfileName"])


async def test_a_deployed_change_reaches_a_running_app_and_a_bad_one_never_does(
    make_services: Any, asgi_client: Any, store: Any, extension: ExtensionStandIn
) -> None:
    # GIVEN a running app configured to read runtime configuration, with "{}" deployed
    model = ScriptedModel(fallback=lambda _request: Turn(text=["ok"]))
    services = make_services(
        model,
        appconfig_application="agent",
        appconfig_environment="test",
        appconfig_profile="runtime",
        appconfig_extension_url=extension.url,
        runtime_config_poll_s=POLL_S,
    )
    assert isinstance(services.profiles, LiveProfiles)
    async with asgi_client(services) as client:
        assert await run_profile(client, "run-1") == "chat_default"
        # WHEN a document adding chat_trial and ramping every user to it is deployed
        deployments(extension).deploy(EVERYONE_ON_TRIAL)
        await asyncio.sleep(POLL_S)
        # THEN the next run after one poll interval runs chat_trial, on the model it names, recorded as ramped
        assert await run_profile(client, "run-2") == "chat_trial"
        assert model.requests[-1].model == "qwen3.5-plus"
        run = await store.runs.get_run("tenant-1", "run-2")
        assert (run.meta.rollout_id, run.meta.rollout_side) == ("trial-1", "new")
        # WHEN a document that ramps to a profile that does not exist is deployed
        deployments(extension).deploy({"rollout": {"ramps": [{**EVERYONE_ON_TRIAL["rollout"]["ramps"][0], "to": "x"}]}})
        await asyncio.sleep(POLL_S)
        # THEN it is refused: runs keep the last good configuration
        assert await run_profile(client, "run-3") == "chat_trial"
        assert services.profiles.version == "2"
        await services.runs.wait_idle()

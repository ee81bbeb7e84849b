"""``make dev`` honours ``LIMITS`` from the environment: the app built as the local runner builds it (settings read
from the environment, moto in-process, the offline model) refuses a user's second run of the minute with ``429
quota_exceeded``, and shows the caller's usage."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from devtools.local.embedded import EmbeddedAws
from devtools.local.runner import build_local_app
from shared.auth import mint_local_token
from shared.settings import LOCAL_JWT_SECRET, Settings
from tests.support.live_app import serve_asgi

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

AUTH = {"Authorization": f"Bearer {mint_local_token(LOCAL_JWT_SECRET, user_id='dev', tenant_id='local')}"}


@pytest.fixture
def local_dev_with_limits() -> Iterator[str]:
    environment = {"JWT_SECRET": LOCAL_JWT_SECRET, "LIMITS": '{"user": {"runsPerMinute": 1}}', "MEMORY_IDLE_S": "900"}
    settings = Settings.from_env(environment).model_copy(update={"embedded": True})
    aws = EmbeddedAws(settings)
    aws.start()
    try:
        app, _services = build_local_app(settings)
        with serve_asgi(app) as url:
            yield url
    finally:
        aws.stop()


async def test_make_dev_refuses_a_second_run_of_the_minute_and_shows_the_usage(local_dev_with_limits: str) -> None:
    def run(n: int) -> dict[str, object]:
        message = {"id": f"m-{n}", "role": "user", "content": "hi"}
        return {"threadId": f"th-{n}", "runId": f"run-{n}", "messages": [message]}

    async with httpx.AsyncClient(base_url=local_dev_with_limits, timeout=60) as client:
        first = await client.post("/api/v1/agent", json=run(1), headers=AUTH)
        second = await client.post("/api/v1/agent", json=run(2), headers=AUTH)
        if second.status_code == 200:  # the minute turned between the two: the next one is the second of its minute
            second = await client.post("/api/v1/agent", json=run(3), headers=AUTH)
        usage = (await client.get("/api/v1/usage", headers=AUTH)).json()
    assert first.status_code == 200 and '"RUN_FINISHED"' in first.text
    assert second.status_code == 429 and second.json()["error"]["details"]["kind"] == "runsPerMinute"
    assert 1 <= int(second.headers["Retry-After"]) <= 60
    assert usage["limits"]["user"] == {"runsPerMinute": 1} and usage["day"]["runs"]["worker"] >= 1

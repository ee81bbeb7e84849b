"""``make dev`` exports traces when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set: the app built exactly as the local runner
builds it (moto in-process, the in-process stream store and memory worker, the offline model), served on loopback,
sends a run's trace and the memory run that follows it (its own trace, linked to the run) to an OTLP/HTTP receiver."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from devtools.local.embedded import EmbeddedAws
from devtools.local.runner import build_local_app
from shared.auth import mint_local_token
from shared.settings import Settings
from shared.tracing.api import install, tracer
from shared.tracing.otel import OtelTracer
from tests.support.live_app import serve_asgi
from tests.support.traces import OtlpReceiver, otlp_receiver

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SECRET = "local-dev-traces-secret-0123456789ab"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as received:
        yield received


@pytest.fixture
def local_dev(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # the in-process memory run's spans, soon
    settings = Settings(
        table_name="local-traces",
        aws_region="us-east-1",
        jwt_secret=SECRET,
        auth_mode="hs256",
        embedded=True,
        memory_idle_s=0,
        otel_exporter_otlp_endpoint=receiver.endpoint,
    )
    aws = EmbeddedAws(settings)
    aws.start()
    previous = tracer()
    try:
        app, _services = build_local_app(settings)
        with serve_asgi(app) as url:
            yield url
    finally:
        configured = install(previous)  # the process's tracer goes back to what the other tests expect
        if isinstance(configured, OtelTracer):
            configured.shutdown()
        aws.stop()


async def test_make_dev_exports_the_runs_trace_and_the_linked_memory_run(
    local_dev: str, receiver: OtlpReceiver
) -> None:
    token = mint_local_token(SECRET, user_id="user-1", tenant_id="tenant-1", scopes=())
    body = {"threadId": "th", "runId": "run-1", "messages": [{"id": "m1", "role": "user", "content": "I like tea"}]}
    async with httpx.AsyncClient(base_url=local_dev, timeout=60) as client:
        response = await client.post("/api/v1/agent", json=body, headers={"Authorization": f"Bearer {token}"})
    assert '"RUN_FINISHED"' in response.text
    for _ in range(100):
        runs = [s for s in receiver.spans if s.name.startswith("invoke_agent ")]
        if len(runs) >= 2:
            break
        await asyncio.sleep(0.1)
    worker = next(s for s in runs if s.attributes["agent.run.id"] == "run-1")
    (memory,) = [s for s in runs if s.attributes["agent.executor"] == "memory"]
    assert memory.trace_id != worker.trace_id and memory.parent_span_id == ""
    assert memory.links == [(worker.trace_id, worker.span_id)]

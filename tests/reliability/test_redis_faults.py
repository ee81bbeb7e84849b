"""Redis (the event stream) becomes unreachable before and during a run.

Promises (docs/reliability.md): down at admission, the request is refused with ``503 service_unavailable`` before
anything is stored, and the same request succeeds once Redis is back. Down during a run, the run goes on and is
saved in DynamoDB; a short outage only delays the live stream (nothing lost, doubled or reordered); a long one ends
the live stream with one ``RUN_ERROR`` ``stream_unavailable``, and resuming later returns the rest exactly once, or,
if the events could not be written at all, a terminal event rebuilt from the run ledger.

Redis sits behind a TCP proxy the test cuts and restores (a partition: Redis keeps its data).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shared.models import RunStatus
from shared.runs.service import RunService
from shared.wiring import ServiceOverrides, Services
from tests.support.agui_clients import validate_sse
from tests.support.live_app import serve_app
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.settings import make_settings
from tests.support.sse import SseFrame, iter_sse_frames
from tests.support.streams import assert_well_formed_run, body, data_frames, events_of, history
from tests.support.tcp_proxy import CuttableProxy
from tests.support.tokens import bearer

pytestmark = pytest.mark.e2e

WORDS = [f"w{i} " for i in range(10)]


@pytest.fixture
def proxy(redis_url: str) -> Iterator[CuttableProxy]:
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    with CuttableProxy("127.0.0.1", port) as p:
        yield p


@pytest.fixture
def live(store: Any, proxy: CuttableProxy, model_server: ModelServer) -> Iterator[tuple[str, Services]]:
    settings = make_settings(redis_url=proxy.url, llm_base_url=model_server.base_url, llm_api_key="k")
    services = Services(settings, overrides=ServiceOverrides(store=store))
    services.runs = RunService(
        services.thread_store,
        services.run_ledger,
        services.audit_log,
        services.stream,
        ping_interval_s=1.0, stream_outage_grace_s=1.0, flush_timeout_s=4.0
    )
    with serve_app(services) as url:
        yield url, services


async def wait_for_status(services: Services, run_id: str, timeout_s: float = 15) -> RunStatus:
    for _ in range(int(timeout_s / 0.1)):
        run = await services.store.runs.get_run("tenant-1", run_id)
        if run is not None and run.status.is_terminal:
            return run.status
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} did not end")


async def stream_with_outage(
    url: str, payload: dict[str, Any], proxy: CuttableProxy, *, cut_after: int, outage_s: float | None
) -> list[SseFrame]:
    """POST a run and read it to the end, cutting Redis off after ``cut_after`` events, for ``outage_s`` (None:
    until the test restores it)."""
    frames: list[SseFrame] = []
    restore: asyncio.TimerHandle | None = None
    async with (
        httpx.AsyncClient(timeout=60) as client,
        client.stream("POST", f"{url}/api/v1/agent", json=payload, headers=bearer()) as resp,
    ):
        assert resp.status_code == 200
        async for frame in iter_sse_frames(resp):
            if frame.data is None:
                continue
            frames.append(frame)
            if len(frames) == cut_after:
                proxy.cut()
                if outage_s is not None:
                    restore = asyncio.get_running_loop().call_later(outage_s, proxy.restore)
    if restore is not None:
        await asyncio.sleep(max(0.0, restore.when() - asyncio.get_running_loop().time()) + 0.05)
    return frames


async def test_redis_down_at_admission_is_a_503_that_stores_nothing_and_a_retry_works(
    live: tuple[str, Services], proxy: CuttableProxy, model_server: ModelServer
) -> None:
    url, services = live
    payload = body("th-r-down", "run-r-down", "remember this")
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        # GIVEN Redis is unreachable
        proxy.cut()
        # WHEN a user sends a message
        refused = await client.post("/api/v1/agent", json=payload, headers=bearer())
        # THEN a clear 503 in the documented error shape, and nothing is stored (no thread, no run)
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "service_unavailable"
        assert (await client.get("/api/v1/threads/th-r-down/history", headers=bearer())).status_code == 404
        assert await services.store.runs.get_run("tenant-1", "run-r-down") is None
        assert model_server.requests == []
        # WHEN Redis is back and the client repeats the same request
        proxy.restore()
        retried = await client.post("/api/v1/agent", json=payload, headers=bearer())
        items = await history(client, "th-r-down")
    # THEN the run happens once and the message is stored once
    assert retried.status_code == 200
    assert assert_well_formed_run(events_of(retried.text))["type"] == "RUN_FINISHED"
    assert [(i["role"], i["content"]) for i in items] == [
        ("user", "remember this"),
        ("assistant", "echo: remember this"),
    ]
    assert len(model_server.requests) == 1


async def test_a_short_outage_mid_run_only_delays_the_live_stream(
    live: tuple[str, Services], proxy: CuttableProxy, model_server: ModelServer
) -> None:
    url, services = live
    model_server.enqueue(ScriptedTurn(text=WORDS, chunk_delay_s=0.25))
    # WHEN Redis is unreachable for 0.6 s (less than the readers' grace) in the middle of the answer
    frames = await stream_with_outage(url, body("th-blip", "run-blip"), proxy, cut_after=4, outage_s=0.6)
    # THEN the live stream still carries every event once, in order, ending with RUN_FINISHED
    events = [f.json() for f in frames]
    assert assert_well_formed_run(events)["type"] == "RUN_FINISHED"
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "".join(WORDS)
    ids = [f.id for f in frames]
    assert all(ids) and len(set(ids)) == len(ids)
    # AND it is exactly what a replay returns
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        replay = await client.get("/api/v1/agent/runs/run-blip/events", headers=bearer())
    assert [(f.id, f.json()) for f in data_frames(replay.text)] == [(f.id, f.json()) for f in frames]
    assert await wait_for_status(services, "run-blip") is RunStatus.SUCCEEDED


async def test_a_long_outage_mid_run_ends_the_live_stream_cleanly_and_resume_returns_the_rest(
    live: tuple[str, Services], proxy: CuttableProxy, model_server: ModelServer
) -> None:
    url, services = live
    model_server.enqueue(ScriptedTurn(text=WORDS, chunk_delay_s=0.25))
    # WHEN Redis is unreachable for 3 s (longer than the readers' grace, shorter than the run's final flush)
    frames = await stream_with_outage(url, body("th-long", "run-long"), proxy, cut_after=4, outage_s=3.0)
    # THEN the live stream ends with exactly one terminal event: RUN_ERROR stream_unavailable, without an id
    events = [f.json() for f in frames]
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "stream_unavailable"
    assert frames[-1].id is None and sum(e["type"] in ("RUN_FINISHED", "RUN_ERROR") for e in events) == 1
    # AND the run itself finished and is saved in DynamoDB
    assert await wait_for_status(services, "run-long") is RunStatus.SUCCEEDED
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        items = await history(client, "th-long")
        # AND resuming from the last id received returns the rest exactly once, ending with RUN_FINISHED
        last_id = [f.id for f in frames if f.id][-1]
        rest = await client.get("/api/v1/agent/runs/run-long/events", headers={**bearer(), "Last-Event-ID": last_id})
        whole = await client.get("/api/v1/agent/runs/run-long/events", headers=bearer())
    assert items[-1]["content"] == "".join(WORDS)
    received = [f for f in frames if f.id] + data_frames(rest.text)
    assert [(f.id, f.json()) for f in received] == [(f.id, f.json()) for f in data_frames(whole.text)]
    assert assert_well_formed_run([f.json() for f in received])["type"] == "RUN_FINISHED"
    assert validate_sse(whole.text).clean


async def test_an_outage_that_outlasts_the_run_is_resumed_with_a_terminal_rebuilt_from_the_ledger(
    live: tuple[str, Services], proxy: CuttableProxy, model_server: ModelServer
) -> None:
    url, services = live
    model_server.enqueue(ScriptedTurn(text=WORDS, chunk_delay_s=0.1))
    # WHEN Redis goes away mid-run and only comes back after the run ended and gave up flushing its events
    frames = await stream_with_outage(url, body("th-gone", "run-gone"), proxy, cut_after=4, outage_s=None)
    assert frames[-1].json()["code"] == "stream_unavailable"
    # (the ledger records the end only after the run's final flush gave up, 4 s into the outage; the terminal
    # event's own last try follows at once, and fails too)
    assert await wait_for_status(services, "run-gone") is RunStatus.SUCCEEDED
    for _ in range(400):  # the run settles on the server's own loop
        if not services.runs.background.is_running("tenant-1", "run-gone"):
            break
        await asyncio.sleep(0.05)
    proxy.restore()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        last_id = [f.id for f in frames if f.id][-1]
        rest = await client.get("/api/v1/agent/runs/run-gone/events", headers={**bearer(), "Last-Event-ID": last_id})
        items = await history(client, "th-gone")
    # THEN the resumed stream ends with exactly one terminal event, rebuilt from the ledger and marked as such
    resumed = data_frames(rest.text)
    assert [f.json()["type"] for f in resumed] == ["RUN_FINISHED"]
    assert resumed[0].json()["metadata"] == {"rebuiltFromLedger": True, "runId": "run-gone"} and resumed[0].id is None
    # AND the whole answer is in history, once
    assert [(i["role"], i["content"]) for i in items] == [("user", "hello"), ("assistant", "".join(WORDS))]

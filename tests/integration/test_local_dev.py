"""``make dev`` never answers a spurious 503: the embedded moto is not thread-safe, so every call into it is
serialised (``shared.adapters.aws.clients.serialise_calls``). Before, about 1 turn in 12 on one thread failed with
``503 service_unavailable`` (``RuntimeError: dictionary changed size during iteration`` in ``transact_write_items``)
while the in-process memory worker was writing.

The app is built exactly as ``make dev`` builds it (``devtools.local.runner.build_local_app`` on a started
``EmbeddedAws``: moto in-process, the in-process stream store, the offline model, the in-process memory worker),
served by uvicorn on loopback; 200 turns go one after another on one thread, with a memory run after each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devtools.local.embedded import EmbeddedAws
from devtools.local.runner import build_local_app
from shared.models import ExecutorKind, RunStatus
from shared.wiring import Services
from tests.support.live_app import serve_asgi
from tests.support.settings import make_settings
from tests.support.streams import body, events_of
from tests.support.tokens import bearer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TURNS = 200


@pytest.fixture
def local_dev() -> Iterator[tuple[str, Services]]:
    # Memory extraction right after each turn (make dev waits for a few quiet seconds; no wait here), so memory
    # runs write while the next turn does.
    settings = make_settings(embedded=True, memory_idle_s=0)
    aws = EmbeddedAws(settings)
    aws.start()
    try:
        app, services = build_local_app(settings)
        with serve_asgi(app) as url:
            yield url, services
    finally:
        aws.stop()


async def test_two_hundred_sequential_turns_with_memory_runs_between_never_fail(
    local_dev: tuple[str, Services],
) -> None:
    url, services = local_dev
    failures: list[tuple[int, int, str]] = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for turn in range(TURNS):
            resp = await client.post(
                "/api/v1/agent",
                json=body("th-dev", f"run-{turn}", f"note {turn}: I like tea", f"u-{turn}"),
                headers=bearer(),
            )
            terminal: dict[str, Any] = events_of(resp.text)[-1] if resp.status_code == 200 else {}
            if resp.status_code != 200 or terminal.get("type") != "RUN_FINISHED":
                failures.append((turn, resp.status_code, resp.text[:300]))
    # THEN no turn failed
    assert failures == []
    # AND memory runs really ran in between (they are what wrote concurrently)
    for _ in range(200):
        runs = await services.store.runs.list_runs_for_thread("tenant-1", "th-dev", limit=1000)
        memory = [r for r in runs if r.meta.executor is ExecutorKind.MEMORY]
        if len(memory) >= TURNS // 10 and all(r.status.is_terminal for r in memory):
            break
        await asyncio.sleep(0.1)
    assert len(memory) >= TURNS // 10
    assert all(r.status is RunStatus.SUCCEEDED for r in runs if r.meta.executor is ExecutorKind.WORKER)


async def test_make_devs_new_table_has_its_migrations_completed(local_dev: tuple[str, Services]) -> None:
    # GIVEN make dev started on a new table (as a new stack's first deploy)
    url, _ = local_dev
    # WHEN its health check is asked
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        health = (await client.get("/healthz")).json()
    # THEN the start ran the migrations on the empty table: none is pending, and the memory read takes the index
    assert health == {"status": "ok", "migrations": {"pending": [], "checked": True}}

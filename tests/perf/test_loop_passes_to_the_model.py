"""Passes of the event loop between the thread's claim and the model request of a chat run.

Why it matters: on a loop that serves many runs, every pass a run waits for (a task that starts on the next pass,
a ``gather`` that wakes its caller on the pass after its last child ends) queues behind all the other runs' ready
work. At 16 concurrent runs that was several milliseconds a pass on the way to the model (docs/benchmarks.md §6).

Counted with a callback that schedules itself again on every pass (``call_soon``), from the claim to the model
request, with the in-memory store and stream (each request one pass, as ``InMemoryStore`` yields once per request)
so the count is exact and repeatable.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

from functions.agent_api.app import create_app
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.llm.types import ChatChunk, ChatRequest
from shared.models import Identity
from shared.wiring import ServiceOverrides, Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.tokens import bearer

MAX_PASSES = 4
"""Measured: 4 on a new thread and on an existing one. It was 11 with a ``gather`` around admission and its memory
read, another around the claim's reads, one around the window's reads and a memory note already read, and the
executor's task started by the run's task instead of beside it."""


class Passes:
    """Counts passes of the running loop once started."""

    def __init__(self) -> None:
        self.count = 0
        self.claimed_at: int | None = None
        self.model_at: int | None = None
        self._running = False

    def start(self) -> None:
        if not self._running:
            self._running = True
            asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._running = False

    def _tick(self) -> None:
        if self._running:
            self.count += 1
            asyncio.get_running_loop().call_soon(self._tick)


class ClaimMarked(InMemoryStore):
    def __init__(self, passes: Passes) -> None:
        super().__init__()
        self._passes = passes

    async def open_and_claim(self, identity: Identity, thread_id: str, run_id: str, **kwargs: Any) -> Any:
        self._passes.start()
        self._passes.claimed_at = self._passes.count
        return await super().open_and_claim(identity, thread_id, run_id, **kwargs)


class ModelMarked(ScriptedModel):
    def __init__(self, passes: Passes) -> None:
        super().__init__(fallback=lambda _request: Turn(text=["Hello."]))
        self._passes = passes

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        self._passes.model_at = self._passes.count
        self._passes.stop()
        async for chunk in super().stream(request):
            yield chunk


def body(run: str, texts: list[str]) -> dict[str, Any]:
    messages = [{"id": f"m-{i}", "role": "user", "content": t} for i, t in enumerate(texts)]
    return {"threadId": "th-passes", "runId": run, "messages": messages, "tools": [], "context": [], "state": {}}


async def passes_to_the_model(services: Services, passes: Passes, payload: dict[str, Any]) -> int:
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        resp = await client.post("/api/v1/agent", json=payload, headers=bearer())
        assert resp.status_code == 200 and '"RUN_FINISHED"' in resp.text, resp.text
    await services.runs.wait_idle()
    assert passes.claimed_at is not None and passes.model_at is not None
    return passes.model_at - passes.claimed_at


async def test_a_chat_run_reaches_the_model_within_a_bounded_number_of_loop_passes() -> None:
    passes = Passes()
    services = Services(
        make_settings(),
        overrides=ServiceOverrides(
            store=ClaimMarked(passes),
            stream=InMemoryEventStream(),
            memory_store=InMemoryMemoryStore(),
            model=ModelMarked(passes),
        ),
    )
    new_thread = await passes_to_the_model(services, passes, body("run-1", ["Hi, I like green tea."]))
    existing = await passes_to_the_model(
        services, passes, body("run-2", ["Hi, I like green tea.", "What should I drink now?"])
    )
    assert new_thread <= MAX_PASSES, new_thread
    assert existing <= MAX_PASSES, existing

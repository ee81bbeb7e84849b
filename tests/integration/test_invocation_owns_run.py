"""The request that started a run returns only after the run has settled, even when its client left mid-run.

On Lambda the invocation lasts as long as that request; were it to return while the run still works, the
environment would be frozen with the run mid-way. Driven at the ASGI level: the client's connection breaks at the
first body chunk (``send`` raises ``OSError``, as uvicorn's does for a closed socket).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from functions.agent_api.app import create_app
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.models import Identity, RunStatus
from shared.wiring import ServiceOverrides, Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.streams import body
from tests.support.tokens import bearer


async def test_the_post_returns_only_after_its_run_settled_when_the_client_left() -> None:
    store = InMemoryStore()
    model = ScriptedModel(Turn(text=[f"w{i} " for i in range(10)], delay_s=0.05))
    overrides = ServiceOverrides(
        store=store, stream=InMemoryEventStream(), model=model, memory_store=InMemoryMemoryStore()
    )
    services = Services(make_settings(), overrides=overrides)
    app = create_app(services)
    payload = json.dumps(body("th-gone", "run-gone")).encode()
    headers = [(b"content-type", b"application/json")] + [(k.lower().encode(), v.encode()) for k, v in bearer().items()]
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/agent",
        "raw_path": b"/api/v1/agent",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent_body = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and b"TEXT_MESSAGE_CONTENT" in message.get("body", b""):
            raise OSError("the client went away")  # the model's first words: the socket is closed

    # WHEN the client leaves while the model is still answering
    with pytest.raises(Exception):  # noqa: B017, PT011 - Starlette reports the broken socket as ClientDisconnect
        await app(scope, receive, send)
    # THEN by the time the request returned, the run had settled: ended in the ledger, the thread free
    run = await store.runs.get_run("tenant-1", "run-gone")
    assert run is not None and run.status.is_terminal, run
    thread = await store.threads.get_thread(Identity(tenant_id="tenant-1", user_id="user-1"), "th-gone")
    assert thread.active_run_id is None
    assert not services.runs.background.is_running("tenant-1", "run-gone")
    # AND the run answered in full although nobody was reading any more: the model was asked once, and the run
    # succeeded with the whole answer stored
    assert len(model.requests) == 1 and run.status is RunStatus.SUCCEEDED
    stored = await store.threads.read_back("tenant-1", "th-gone", before_seq=None, limit=5)
    assert [m.content for m in stored if m.role == "assistant"] == ["".join(f"w{i} " for i in range(10))]

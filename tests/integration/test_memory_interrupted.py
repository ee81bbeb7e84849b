"""A memory run whose model stream is cut (a single-slot server serving another request) is a one-line retryable
warning, and the next extraction covers the messages the cut run missed.

Real ``openai`` client over HTTP against the scripted model server (the stream breaks off before a
``finish_reason``, as llama.cpp's server does when a new request arrives), moto, a real redis-server.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.local.memory_worker import InProcessMemoryWorker
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.llm.openai_chat import OpenAIChatModel
from shared.memory.job import MemoryRunFailed
from shared.memory.models import BusEvent
from shared.models import Identity
from shared.wiring import ServiceOverrides, Services
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.settings import make_settings
from tests.support.tokens import bearer

IDENTITY = Identity(tenant_id="tenant-1", user_id="user-1")
CUT = ScriptedTurn(text=["thinking ", "about ", "it"], disconnect_after_chunks=2)


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


@pytest.fixture
async def services(store: Any, redis_stream: Any, model_server: ModelServer) -> Any:
    model = OpenAIChatModel(model_server.base_url, "test-key", provider="openai-compatible", max_retries=0)
    overrides = ServiceOverrides(store=store, stream=redis_stream, model=model, memory_store=InMemoryMemoryStore())
    yield Services(make_settings(memory_idle_s=0), overrides=overrides)
    await model.aclose()


async def chat(client: Any, services: Services, run: str, text: str) -> None:
    body = {"threadId": "th-mem", "runId": run, "messages": [{"id": f"{run}-u", "role": "user", "content": text}]}
    resp = await client.post("/api/v1/agent", json=body, headers=bearer())
    assert resp.status_code == 200
    await services.runs.wait_idle()


def new_ids(rendered: str) -> list[str]:
    return re.findall(r'<message id="([^"]+)" role="user" new="true">', rendered)


async def test_a_cut_memory_run_is_a_retryable_warning_and_the_next_extraction_covers_its_messages(
    services: Services, model_server: ModelServer, asgi_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    extraction = services.memory_extraction
    memories = services.overrides.memory_store
    async with asgi_client(services) as client:
        # GIVEN a thread with a user message
        await chat(client, services, "run-1", "I live in Hangzhou.")
        # WHEN its memory run's model stream is cut
        model_server.enqueue(CUT)
        with caplog.at_level(logging.INFO), pytest.raises(MemoryRunFailed) as failure:
            await extraction.extract(IDENTITY, "th-mem", run_id="mem-1")
        # THEN the failure is retryable, logged as one warning line without a traceback, and nothing as an error
        assert failure.value.retryable
        assert failure.value.details["error_code"] == "model_stream_interrupted"
        cut = [r for r in caplog.records if r.getMessage().startswith("run failed")]
        assert [(r.levelno, r.exc_info) for r in cut] == [(logging.WARNING, None)]
        assert cut[0].__dict__["retryable"] is True
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        # AND the extraction cursor did not move
        assert await memories.get_cursor("tenant-1", "th-mem") == 0
        # WHEN the user writes again and the next extraction runs
        await chat(client, services, "run-2", "I work at a bank.")
        model_server.enqueue(ScriptedTurn(text=["none"]))
        report = await extraction.extract(IDENTITY, "th-mem", run_id="mem-2")
    # THEN it read both user messages as new, the missed one included, and moved the cursor past them
    assert report.status == "extracted"
    rendered = model_server.requests[-1]["messages"][1]["content"]
    assert new_ids(rendered) == ["run-1-u", "run-2-u"]
    assert await memories.get_cursor("tenant-1", "th-mem") == 4


async def test_the_local_memory_worker_logs_a_cut_run_as_one_retryable_warning(
    services: Services, model_server: ModelServer, asgi_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with asgi_client(services) as client:
        await chat(client, services, "run-1", "I live in Hangzhou.")
    model_server.enqueue(CUT)
    worker = InProcessMemoryWorker(services)
    detail = {"tenantId": "tenant-1", "userId": "user-1", "threadId": "th-mem", "runId": "run-1"}
    with caplog.at_level(logging.INFO):
        await worker.publish([BusEvent(source="agent-backend", detail_type="agent.run.completed", detail=detail)])
        for _ in range(200):
            if any("cut short" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.05)
    worker.close()
    [line] = [r for r in caplog.records if "cut short" in r.getMessage()]
    assert line.levelno == logging.WARNING
    assert line.exc_info is None
    assert "model_stream_interrupted" in line.getMessage()
    assert "next extraction on this thread covers its messages" in line.getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

"""Memory in use: the worker sees the user's active memories (marked), the user reads and hard-deletes their own,
and every finished worker run publishes "run completed" for the memory Lambda."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.memory.injection import MEMORY_INJECTION_SENTINEL
from shared.memory.models import Memory, MemoryKind
from shared.memory.store import InMemoryMemoryStore
from shared.memory.trigger import RunCompletedPublisher
from shared.wiring import Services
from tests.conftest import bearer, make_settings
from tests.support.scripted_model import ScriptedModel, Turn


class RecordingPublisher:
    def __init__(self) -> None:
        self.events: list[Any] = []

    async def publish(self, events: Sequence[Any]) -> list[Any]:
        self.events.extend(events)
        return []


def memory(mid: str, user: str, content: str) -> Memory:
    return Memory(
        id=mid,
        tenant_id="tenant-1",
        user_id=user,
        kind=MemoryKind.PREFERENCE,
        content=content,
        confidence=0.9,
        evidence_quote=content,
    )


def body(thread: str, run: str, text: str) -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [{"id": f"{run}-u", "role": "user", "content": text}]}


async def test_worker_context_holds_the_users_memories_marked_and_runs_publish_completion(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    # GIVEN one memory of the caller and one of another user
    memories = InMemoryMemoryStore()
    await memories.put(memory("mem-1", "user-1", "prefers answers in French"))
    await memories.put(memory("mem-2", "user-2", "OTHER-USER-SECRET"))
    publisher = RecordingPublisher()
    model = ScriptedModel(Turn(text=["d'accord"]))
    services = Services(
        make_settings(),
        overrides={
            "store": store,
            "stream": redis_stream,
            "model": model,
            "memory_store": memories,
            "run_completed_publisher": RunCompletedPublisher(publisher),
        },
    )
    async with asgi_client(services) as client:
        resp = await client.post(
            "/api/v1/agent", json=body("th-m", "run-m", "How should you answer me?"), headers=bearer()
        )
        await services.runs.wait_idle()
    assert resp.status_code == 200
    # THEN the model saw the caller's memory in a marked system note, and nothing of the other user's
    system_notes = [m.content or "" for m in model.requests[0].messages if m.role == "system"]
    note = next(n for n in system_notes if MEMORY_INJECTION_SENTINEL in n)
    assert "prefers answers in French" in note
    assert "OTHER-USER-SECRET" not in " ".join(system_notes)
    # AND the finished worker run was published once for memory extraction
    assert len(publisher.events) == 1
    assert "run-m" in str(publisher.events[0])


async def test_memories_api_lists_and_hard_deletes_only_the_callers_own(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    memories = InMemoryMemoryStore()
    await memories.put(memory("mem-a", "user-1", "likes tea"))
    await memories.put(memory("mem-b", "user-2", "likes coffee"))
    services = Services(
        make_settings(),
        overrides={"store": store, "stream": redis_stream, "model": ScriptedModel(), "memory_store": memories},
    )
    async with asgi_client(services) as client:
        mine = await client.get("/api/v1/memories", headers=bearer())
        steal = await client.delete("/api/v1/memories/mem-b", headers=bearer())
        other_tenant = await client.get("/api/v1/memories", headers=bearer(tenant="tenant-2"))
        deleted = await client.delete("/api/v1/memories/mem-a", headers=bearer())
        again = await client.delete("/api/v1/memories/mem-a", headers=bearer())
        after = await client.get("/api/v1/memories", headers=bearer())
    assert [m["id"] for m in mine.json()["items"]] == ["mem-a"]
    assert "coffee" not in mine.text
    assert steal.status_code == 404 and "coffee" not in steal.text
    assert other_tenant.json()["items"] == []
    assert deleted.status_code == 204
    assert again.status_code == 404
    assert after.json()["items"] == []
    assert await memories.get("tenant-1", "user-2", "mem-b") is not None

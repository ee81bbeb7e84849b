"""Memory in use: the worker sees the user's active memories (marked), the user reads and hard-deletes their own,
and every finished worker run publishes "run completed" for the memory Lambda."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.executors.transcript import RUN_NOTES_BEGIN, RUN_NOTES_END
from shared.memory.injection import MEMORY_INJECTION_SENTINEL
from shared.memory.models import Memory, MemoryKind
from shared.memory.trigger import RunCompletedPublisher
from shared.wiring import ServiceOverrides, Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.tokens import bearer


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
        overrides=ServiceOverrides(
            store=store,
            stream=redis_stream,
            model=model,
            memory_store=memories,
            run_completed_publisher=RunCompletedPublisher(publisher),
        ),
    )
    async with asgi_client(services) as client:
        resp = await client.post(
            "/api/v1/agent", json=body("th-m", "run-m", "How should you answer me?"), headers=bearer()
        )
        await services.runs.wait_idle()
    assert resp.status_code == 200
    # THEN the model saw the caller's memory in a marked note, and nothing of the other user's
    prompt = [m.content or "" for m in model.requests[0].messages]
    note = next(n for n in prompt if MEMORY_INJECTION_SENTINEL in n)
    assert "prefers answers in French" in note
    assert "OTHER-USER-SECRET" not in " ".join(prompt)
    # AND the finished worker run was published once for memory extraction
    assert len(publisher.events) == 1
    assert "run-m" in str(publisher.events[0])


async def test_what_changes_per_run_comes_after_the_history_so_the_next_run_repeats_this_runs_prefix(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    # GIVEN a user with a memory, and a client sending context with each message
    memories = InMemoryMemoryStore()
    await memories.put(memory("mem-1", "user-1", "prefers answers in French"))
    model = ScriptedModel(Turn(text=["un"]), Turn(text=["deux"]))
    services = Services(
        make_settings(),
        overrides=ServiceOverrides(store=store, stream=redis_stream, model=model, memory_store=memories),
    )
    first = {**body("th-c", "run-1", "first question"), "context": [{"description": "page", "value": "home"}]}
    second = {
        "threadId": "th-c",
        "runId": "run-2",
        "messages": [
            *first["messages"],
            {"id": "run-1-a", "role": "assistant", "content": "un"},
            {"id": "run-2-u", "role": "user", "content": "second question"},
        ],
        "context": [{"description": "page", "value": "settings"}],
    }
    # WHEN two runs follow each other on the thread
    async with asgi_client(services) as client:
        for payload in (first, second):
            resp = await client.post("/api/v1/agent", json=payload, headers=bearer())
            assert resp.status_code == 200
            await services.runs.wait_idle()
    one, two = (list(request.messages) for request in model.requests)
    # THEN the notes (memories, then client context) open the newest user message, and the request has one
    # system message, first (Qwen3.5's template refuses any other)
    assert [m.role for m in two] == ["system", "user", "assistant", "user"]
    newest = two[-1].content or ""
    assert newest.startswith(RUN_NOTES_BEGIN) and newest.endswith("\n\nsecond question")
    assert newest.index(MEMORY_INJECTION_SENTINEL) < newest.index("page: settings") < newest.index(RUN_NOTES_END)
    assert "page: home" not in " ".join(m.content or "" for m in two)
    # AND the second request starts with everything the first one sent before its notes (the cacheable prefix)
    assert [m.role for m in one] == ["system", "user"]
    assert two[0] == one[0] and two[1].content == "first question"


async def test_memories_api_lists_and_hard_deletes_only_the_callers_own(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    memories = InMemoryMemoryStore()
    await memories.put(memory("mem-a", "user-1", "likes tea"))
    await memories.put(memory("mem-b", "user-2", "likes coffee"))
    services = Services(
        make_settings(),
        overrides=ServiceOverrides(store=store, stream=redis_stream, model=ScriptedModel(), memory_store=memories),
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


async def test_patch_writes_a_new_version_supersedes_the_old_and_audits_who_changed_what(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    # GIVEN a memory the memory executor wrote from a thread, and another user's memory
    memories = InMemoryMemoryStore()
    original = memory("mem-a", "user-1", "likes green tea").model_copy(
        update={"thread_id": "th-tea", "run_id": "mem_run_1", "source_message_ids": ("m-7",)}
    )
    await memories.put(original)
    await memories.put(memory("mem-b", "user-2", "likes coffee"))
    services = Services(
        make_settings(),
        overrides=ServiceOverrides(store=store, stream=redis_stream, model=ScriptedModel(), memory_store=memories),
    )
    async with asgi_client(services) as client:
        listed = await client.get("/api/v1/memories", headers=bearer())
        # WHEN the user corrects it
        edited = await client.patch(
            "/api/v1/memories/mem-a", json={"content": "likes oolong tea, not green tea"}, headers=bearer()
        )
        # AND tries to edit the old version again, someone else's memory, and with malformed bodies
        stale = await client.patch("/api/v1/memories/mem-a", json={"content": "x"}, headers=bearer())
        steal = await client.patch("/api/v1/memories/mem-b", json={"content": "hacked"}, headers=bearer())
        other_tenant = await client.patch(
            f"/api/v1/memories/{edited.json()['id']}", json={"content": "x"}, headers=bearer(tenant="tenant-2")
        )
        blank = await client.patch(f"/api/v1/memories/{edited.json()['id']}", json={"content": "  "}, headers=bearer())
        extra = await client.patch(
            f"/api/v1/memories/{edited.json()['id']}", json={"content": "ok", "confidence": 1}, headers=bearer()
        )
        too_long = await client.patch(
            f"/api/v1/memories/{edited.json()['id']}", json={"content": "x" * 501}, headers=bearer()
        )
        after = await client.get("/api/v1/memories", params={"includeInactive": "true"}, headers=bearer())
    # THEN the list showed the provenance of the executor's memory
    [shown] = listed.json()["items"]
    assert (shown["sourceMessageIds"], shown["evidenceQuote"], shown["runId"], shown["threadId"]) == (
        ["m-7"],
        "likes green tea",
        "mem_run_1",
        "th-tea",
    )
    # AND the edit answered the new version, written by the user, linked to the old one
    assert edited.status_code == 200
    new = edited.json()
    assert new["id"] != "mem-a" and new["content"] == "likes oolong tea, not green tea"
    assert (new["status"], new["editedBy"], new["supersedes"], new["kind"]) == (
        "active",
        "user-1",
        "mem-a",
        "preference",
    )
    # AND the old version is kept, superseded by the new one
    by_id = {m["id"]: m for m in after.json()["items"]}
    assert by_id["mem-a"]["status"] == "superseded" and by_id["mem-a"]["supersededBy"] == new["id"]
    assert by_id["mem-a"]["statusReason"] == "edited by the user"
    assert [m["id"] for m in after.json()["items"] if m["status"] == "active"] == [new["id"]]
    # AND the edit is audited in the memory's thread: who changed what
    [record] = [r for r in await store.audit.list_for_thread("tenant-1", "th-tea", limit=50) if r.kind == "memory_edit"]
    assert record.user_id == "user-1" and record.details["edited_by"] == "user-1"
    assert (record.details["supersedes"], record.details["memory_id"]) == ("mem-a", new["id"])
    assert record.details["old_content_preview"] == "likes green tea"
    assert record.details["new_content_preview"] == "likes oolong tea, not green tea"
    # AND the attacks and mistakes changed nothing
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "memory_not_active"
    assert steal.status_code == 404 and "coffee" not in steal.text
    assert other_tenant.status_code == 404
    assert blank.status_code == extra.status_code == too_long.status_code == 422
    unchanged = await memories.get("tenant-1", "user-2", "mem-b")
    assert unchanged is not None and unchanged.content == "likes coffee" and unchanged.is_active

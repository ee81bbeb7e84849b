"""Erasure through the API (``DELETE /api/v1/threads/{threadId}``, ``DELETE /api/v1/me``), from the owner's and the
attacker's side: moto's DynamoDB, a real redis-server, the app in-process.

The cancellation of pending memory extraction through SQS is in ``test_memory_coalescing.py``.
"""

from __future__ import annotations

from typing import Any

import jwt
import pytest

from shared.adapters.aws.clients import client_factory
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.aws.memory_pending import DynamoDBPendingExtractions
from shared.adapters.aws.memory_store import DynamoDBMemoryStore
from shared.auth import ERASE_SCOPE
from shared.memory.models import Deactivation, Memory, MemoryKind, MemoryStatus
from shared.models import Identity, utc_now
from shared.stream_keys import run_stream_key, thread_stream_key
from shared.wiring import Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import REGION, TABLE, TEST_SECRET
from tests.support.tokens import bearer

TENANT, USER = "tenant-1", "user-1"
ERASER = (ERASE_SCOPE,)


def chat(thread: str, run: str, text: str = "hello") -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [{"id": f"{run}-u", "role": "user", "content": text}]}


def a_memory(memory_id: str, user: str = USER, tenant: str = TENANT) -> Memory:
    return Memory(
        id=memory_id,
        tenant_id=tenant,
        user_id=user,
        kind=MemoryKind.PROFILE,
        content="likes tea",
        confidence=0.9,
        evidence_quote="I like tea",
        source_message_ids=("m1",),
        run_id="r1",
        thread_id="th-1",
    )


@pytest.fixture
def services(make_services: Any) -> Services:
    built: Services = make_services(ScriptedModel(fallback=lambda _r: Turn(text=["ok"])))
    return built


async def run_turn(client: Any, services: Services, thread: str, run: str, **auth: Any) -> None:
    resp = await client.post("/api/v1/agent", json=chat(thread, run), headers=bearer(**auth))
    assert resp.status_code == 200
    await services.runs.wait_idle()


async def stream_length(redis_stream: Any, key: str) -> int:
    return len(await redis_stream.read_after(key, "0-0", block_ms=0))


async def test_the_owner_deletes_a_thread_with_its_messages_runs_and_streams_and_the_audit_stays(
    services: Services, asgi_client: Any, store: DynamoDBStore, redis_stream: Any
) -> None:
    async with asgi_client(services) as client:
        # GIVEN two finished runs on th-1, one on th-2, and th-1's pending extraction marker
        await run_turn(client, services, "th-1", "run-1")
        await run_turn(client, services, "th-1", "run-2")
        await run_turn(client, services, "th-2", "run-3")
        pending = DynamoDBPendingExtractions(TABLE, client_factory("dynamodb", region=REGION))
        await pending.note(TENANT, USER, "th-1", now=utc_now())
        assert await stream_length(redis_stream, thread_stream_key(TENANT, "th-1")) > 0
        # WHEN the owner deletes th-1
        resp = await client.delete("/api/v1/threads/th-1", headers=bearer())
        # THEN 204; the thread, its history, runs, streams and pending marker are gone
        assert resp.status_code == 204 and resp.content == b""
        assert (await client.get("/api/v1/threads/th-1/history", headers=bearer())).status_code == 404
        assert (await client.get("/api/v1/agent/runs/run-1/events", headers=bearer())).status_code == 404
        listed = (await client.get("/api/v1/threads", headers=bearer())).json()["items"]
        assert [t["threadId"] for t in listed] == ["th-2"]
        assert await store.runs.get_run(TENANT, "run-2") is None
        for key in (thread_stream_key(TENANT, "th-1"), run_stream_key(TENANT, "run-1")):
            assert await stream_length(redis_stream, key) == 0
        assert await pending.get(TENANT, "th-1") is None
        # AND the audit trail of th-1 is kept, with the deletion in it; th-2 is whole
        kinds = [r.kind for r in await store.audit.list_for_thread(TENANT, "th-1", limit=100)]
        assert kinds[-1] == "thread_deleted"
        assert await stream_length(redis_stream, thread_stream_key(TENANT, "th-2")) > 0  # run-3 lives there
        # AND deleting it again is 404
        assert (await client.delete("/api/v1/threads/th-1", headers=bearer())).status_code == 404


async def test_another_users_or_tenants_thread_id_answers_404_and_deletes_nothing(
    services: Services, asgi_client: Any, store: DynamoDBStore
) -> None:
    async with asgi_client(services) as client:
        await run_turn(client, services, "th-1", "run-1")
        # WHEN another user of the tenant, and the same user id in another tenant, delete th-1
        other_user = await client.delete("/api/v1/threads/th-1", headers=bearer("user-2", TENANT))
        other_tenant = await client.delete("/api/v1/threads/th-1", headers=bearer(USER, "tenant-2"))
        missing = await client.delete("/api/v1/threads/th-never", headers=bearer("user-2", TENANT))
        # THEN each is the same 404 a missing thread gets: nothing reveals that th-1 exists
        assert other_user.status_code == other_tenant.status_code == missing.status_code == 404
        assert other_user.json() == missing.json()
        assert (await client.get("/api/v1/threads/th-1/history", headers=bearer())).status_code == 200
        assert await store.runs.get_run(TENANT, "run-1") is not None


async def test_forged_expired_and_missing_tokens_delete_nothing(
    services: Services, asgi_client: Any, store: DynamoDBStore
) -> None:
    now = int(utc_now().timestamp())
    claims = {"sub": USER, "tenant_id": TENANT, "scope": ERASE_SCOPE, "iat": now, "exp": now + 600}
    forged = jwt.encode(claims, "not-the-deployments-secret-but-long-enough", algorithm="HS256")
    unsigned = jwt.encode(claims, None, algorithm="none")
    expired = jwt.encode({**claims, "exp": now - 3600}, TEST_SECRET, algorithm="HS256")
    async with asgi_client(services) as client:
        await run_turn(client, services, "th-1", "run-1")
        for path in ("/api/v1/threads/th-1", "/api/v1/me"):
            for token in (forged, unsigned, expired):
                resp = await client.delete(path, headers={"Authorization": f"Bearer {token}"})
                assert resp.status_code == 401, (path, resp.text)
            assert (await client.delete(path)).status_code == 401
        assert (await client.get("/api/v1/threads/th-1/history", headers=bearer())).status_code == 200


async def test_a_thread_with_an_active_run_is_refused_with_409_and_kept(
    services: Services, asgi_client: Any, store: DynamoDBStore
) -> None:
    async with asgi_client(services) as client:
        await run_turn(client, services, "th-1", "run-1")
        # GIVEN a live run holds the thread (claimed a moment ago)
        owner = Identity(tenant_id=TENANT, user_id=USER)
        assert await store.threads.claim_thread(owner, "th-1", "run-live", stale_before=utc_now())
        # WHEN the owner deletes it  THEN 409 thread_busy, nothing deleted, the run keeps its claim
        resp = await client.delete("/api/v1/threads/th-1", headers=bearer())
        assert resp.status_code == 409 and resp.json()["error"]["code"] == "thread_busy"
        assert (await store.threads.get_thread(owner, "th-1")).active_run_id == "run-live"
        assert len(await store.threads.read_forward(TENANT, "th-1", after_seq=0, limit=10)) == 2


async def test_a_thread_whose_memory_run_is_in_flight_is_refused_with_409(
    services: Services, asgi_client: Any, store: DynamoDBStore
) -> None:
    async with asgi_client(services) as client:
        await run_turn(client, services, "th-1", "run-1")
        # GIVEN a memory run holds the thread's extraction lease (memory runs do not claim the thread)
        pending = DynamoDBPendingExtractions(TABLE, client_factory("dynamodb", region=REGION))
        now = utc_now()
        await pending.note(TENANT, USER, "th-1", now=now)
        assert await pending.acquire(TENANT, "th-1", "mem-1", now=now, lease_until=now.replace(year=now.year + 1))
        # WHEN the owner deletes it  THEN 409, the thread and the marker are kept, and the thread is free again
        resp = await client.delete("/api/v1/threads/th-1", headers=bearer())
        assert resp.status_code == 409 and resp.json()["error"]["code"] == "thread_busy"
        marker = await pending.get(TENANT, "th-1")
        assert marker is not None and marker.running_run_id == "mem-1"
        owner = Identity(tenant_id=TENANT, user_id=USER)
        assert (await store.threads.get_thread(owner, "th-1")).active_run_id is None


async def test_deleting_the_account_needs_the_erase_scope(services: Services, asgi_client: Any, aws: Any) -> None:
    memories = DynamoDBMemoryStore(TABLE, lambda: aws)
    await memories.put(a_memory("mem-1"))
    async with asgi_client(services) as client:
        await run_turn(client, services, "th-1", "run-1")
        # WHEN a token without agent:erase (but with another scope) deletes the account  THEN 403, nothing deleted
        resp = await client.delete("/api/v1/me", headers=bearer(scopes=("agent:audit",)))
        assert resp.status_code == 403 and resp.json()["error"]["code"] == "missing_scope"
        assert (await client.get("/api/v1/threads/th-1/history", headers=bearer())).status_code == 200
    assert [m.id for m in await memories.list_memories(TENANT, USER)] == ["mem-1"]


async def test_the_account_deletion_erases_only_the_callers_threads_memories_and_extractions(
    services: Services, asgi_client: Any, aws: Any, store: DynamoDBStore
) -> None:
    memories = DynamoDBMemoryStore(TABLE, lambda: aws)
    pending = DynamoDBPendingExtractions(TABLE, client_factory("dynamodb", region=REGION))
    for memory in (a_memory("mem-1"), a_memory("mem-2"), a_memory("mem-x", user="user-2")):
        await memories.put(memory)
    await memories.deactivate(
        TENANT,
        USER,
        "mem-2",
        Deactivation(
            status=MemoryStatus.RETRACTED,
            reason="the user said so",
            run_id="r2",
            evidence_quote="I like tea",
            source_message_ids=("m1",),
        ),
    )
    async with asgi_client(services) as client:
        # GIVEN the caller's two threads (one with a pending extraction) and another user's thread
        await run_turn(client, services, "th-1", "run-1")
        await run_turn(client, services, "th-2", "run-2")
        await run_turn(client, services, "th-x", "run-x", user="user-2")
        noted = utc_now()
        await pending.note(TENANT, USER, "th-1", now=noted)
        # WHEN the caller deletes their account
        resp = await client.delete("/api/v1/me", headers=bearer(scopes=ERASER))
        # THEN everything of theirs is gone, counted in the answer
        assert resp.status_code == 200
        assert resp.json() == {"deleted": {"threads": 2, "memories": 2, "automations": 0}}
        assert (await client.get("/api/v1/threads", headers=bearer())).json()["items"] == []
        assert await memories.list_memories(TENANT, USER, include_inactive=True) == []
        assert await pending.get(TENANT, "th-1") is None
        cancelled = await pending.user_cancelled_at(TENANT, USER)
        assert cancelled is not None and cancelled >= noted
        # AND the other user's thread and memory are untouched
        other = (await client.get("/api/v1/threads", headers=bearer("user-2"))).json()["items"]
        assert [t["threadId"] for t in other] == ["th-x"]
        assert [m.id for m in await memories.list_memories(TENANT, "user-2")] == ["mem-x"]
        # AND repeating it is harmless
        again = await client.delete("/api/v1/me", headers=bearer(scopes=ERASER))
        assert again.json() == {"deleted": {"threads": 0, "memories": 0, "automations": 0}}


async def test_the_account_deletion_names_a_busy_thread_and_deletes_the_rest(
    services: Services, asgi_client: Any, store: DynamoDBStore
) -> None:
    async with asgi_client(services) as client:
        await run_turn(client, services, "th-1", "run-1")
        await run_turn(client, services, "th-2", "run-2")
        owner = Identity(tenant_id=TENANT, user_id=USER)
        assert await store.threads.claim_thread(owner, "th-2", "run-live", stale_before=utc_now())
        resp = await client.delete("/api/v1/me", headers=bearer(scopes=ERASER))
        assert resp.status_code == 409
        error = resp.json()["error"]
        assert error["code"] == "thread_busy" and error["details"]["threadIds"] == ["th-2"]
        assert error["details"]["deleted"]["threads"] == 1
        listed = (await client.get("/api/v1/threads", headers=bearer())).json()["items"]
        assert [t["threadId"] for t in listed] == ["th-2"]

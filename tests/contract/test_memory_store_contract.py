"""Contract of the memory store: the same cases against the in-memory reference and DynamoDB (moto)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import boto3
import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.aws.memory_store import DynamoDBMemoryStore
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.memory.models import Deactivation, Memory, MemoryKind, MemoryStatus
from shared.models import Identity, Message, Role
from tests.support.settings import REGION, TABLE

Store = InMemoryMemoryStore | DynamoDBMemoryStore
AT = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["memory", "dynamodb"])
def memories(request: pytest.FixtureRequest) -> Store:
    if request.param == "memory":
        return InMemoryMemoryStore()
    request.getfixturevalue("aws")
    return DynamoDBMemoryStore(TABLE, lambda: cast(Any, boto3.client("dynamodb", region_name=REGION)))


def mem(mid: str, user: str = "alice", tenant: str = "tenant-a", content: str = "Likes tea") -> Memory:
    return Memory(
        id=mid,
        tenant_id=tenant,
        user_id=user,
        kind=MemoryKind.PREFERENCE,
        content=content,
        confidence=0.8,
        evidence_quote="I like tea",
        source_message_ids=("m1",),
        run_id="r1",
        thread_id="th",
        created_at=AT,
        updated_at=AT,
    )


async def test_put_get_and_list_active(memories: Store) -> None:
    await memories.put(mem("mem_1"))
    await memories.put(mem("mem_2", content="Lives in Lyon"))
    assert await memories.get("tenant-a", "alice", "mem_1") == mem("mem_1")
    assert {m.id for m in await memories.list_memories("tenant-a", "alice")} == {"mem_1", "mem_2"}


async def test_another_users_or_tenants_memory_is_not_found(memories: Store) -> None:
    await memories.put(mem("mem_1"))
    assert await memories.get("tenant-a", "bob", "mem_1") is None
    assert await memories.get("tenant-b", "alice", "mem_1") is None
    assert await memories.list_memories("tenant-a", "bob") == []
    assert (
        await memories.deactivate(
            "tenant-a",
            "bob",
            "mem_1",
            Deactivation(
                status=MemoryStatus.RETRACTED,
                reason="x",
                run_id="r",
                evidence_quote="q",
                source_message_ids=["m"],
            ),
        )
        is None
    )
    assert await memories.delete("tenant-a", "bob", "mem_1") is False
    assert (await memories.get("tenant-a", "alice", "mem_1")) == mem("mem_1")


async def test_deactivate_keeps_the_memory_with_provenance_and_only_once(memories: Store) -> None:
    await memories.put(mem("mem_old"))
    updated = await memories.deactivate(
        "tenant-a",
        "alice",
        "mem_old",
        Deactivation(
            status=MemoryStatus.SUPERSEDED,
            reason="moved",
            run_id="r2",
            evidence_quote="I moved",
            source_message_ids=["m9"],
            superseded_by="mem_new",
        ),
    )
    assert updated is not None and updated.status is MemoryStatus.SUPERSEDED
    stored = await memories.get("tenant-a", "alice", "mem_old")
    assert stored == updated
    assert (stored.superseded_by, stored.status_run_id, stored.status_source_message_ids) == ("mem_new", "r2", ("m9",))
    assert await memories.list_memories("tenant-a", "alice") == []
    assert [m.id for m in await memories.list_memories("tenant-a", "alice", include_inactive=True)] == ["mem_old"]
    again = await memories.deactivate(
        "tenant-a",
        "alice",
        "mem_old",
        Deactivation(
            status=MemoryStatus.RETRACTED,
            reason="x",
            run_id="r3",
            evidence_quote="q",
            source_message_ids=["m"],
        ),
    )
    assert again is None


async def test_delete_is_a_hard_delete(memories: Store) -> None:
    await memories.put(mem("mem_1"))
    assert await memories.delete("tenant-a", "alice", "mem_1") is True
    assert await memories.get("tenant-a", "alice", "mem_1") is None
    assert await memories.delete("tenant-a", "alice", "mem_1") is False


async def test_the_cursor_starts_at_zero_and_only_moves_forward(memories: Store) -> None:
    assert await memories.get_cursor("tenant-a", "th") == 0
    await memories.advance_cursor("tenant-a", "th", 7)
    await memories.advance_cursor("tenant-a", "th", 3)
    assert await memories.get_cursor("tenant-a", "th") == 7
    assert await memories.get_cursor("tenant-a", "other-thread") == 0
    assert await memories.get_cursor("tenant-b", "th") == 0


async def test_the_cursor_item_is_invisible_to_message_reads(aws: Any) -> None:
    # GIVEN a thread with messages and a cursor item in the same partition
    store = DynamoDBStore(TABLE, lambda: cast(Any, boto3.client("dynamodb", region_name=REGION)))
    memories = DynamoDBMemoryStore(TABLE, lambda: cast(Any, boto3.client("dynamodb", region_name=REGION)))
    alice = Identity(tenant_id="tenant-a", user_id="alice")
    await store.threads.open_thread(alice, "th")
    await store.threads.append_messages(alice, "th", [Message(id="m1", thread_id="th", role=Role.USER, content="hi")])
    await memories.advance_cursor("tenant-a", "th", 1)
    # THEN reading the thread back or forward finds only the message
    assert [m.id for m in await store.threads.read_back("tenant-a", "th", before_seq=None, limit=10)] == ["m1"]
    assert [m.id for m in await store.threads.read_forward("tenant-a", "th", after_seq=0, limit=10)] == ["m1"]


async def test_list_active_is_the_newest_updated_active_memories_up_to_the_limit(memories: Store) -> None:
    for i in range(5):
        await memories.put(mem(f"mem_{i}", content=f"fact {i}").model_copy(update={"updated_at": AT.replace(hour=i)}))
    await memories.deactivate(
        "tenant-a",
        "alice",
        "mem_4",
        Deactivation(
            status=MemoryStatus.RETRACTED,
            reason="user",
            run_id="r2",
            evidence_quote="",
            source_message_ids=(),
        ),
    )
    await memories.put(mem("mem_bob", user="bob"))
    active = await memories.list_active("tenant-a", "alice", limit=3)
    assert [m.id for m in active] == ["mem_3", "mem_2", "mem_1"]

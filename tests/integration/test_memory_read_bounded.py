"""The worker's memory read is bounded: the same requests and read units whatever the user's history of memories.

DynamoDB over moto. Read units are computed as DynamoDB bills a Query (the size of the items it reads, in 4 KB
units, halved for an eventually consistent read): moto does not report them.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.adapters.aws.memory_store import DynamoDBMemoryStore, _to_item
from shared.memory.injection import MEMORY_CANDIDATES, ActiveMemories
from shared.memory.models import Memory, MemoryKind, MemoryStatus
from shared.models import Identity
from tests.support.settings import TABLE

ALICE = Identity(tenant_id="tenant-a", user_id="alice")
AT = datetime(2026, 1, 1, tzinfo=UTC)


class Reads:
    """The boto3 client, recording each request and the read units of what each Query read."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.requests = 0
        self.read_units = 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name not in {"query", "get_item", "batch_get_item", "scan"}:
            return attr

        def call(**kwargs: Any) -> Any:
            self.requests += 1
            resp = attr(**kwargs)
            size = sum(len(json.dumps(item)) for item in resp.get("Items", []))
            units = max(1, math.ceil(size / 4096))
            self.read_units += units if kwargs.get("ConsistentRead") else units / 2
            return resp

        return call


def memory(i: int, *, active: bool) -> Memory:
    return Memory(
        id=f"mem_{i:05d}",
        tenant_id="tenant-a",
        user_id="alice",
        kind=MemoryKind.PREFERENCE,
        content=f"fact number {i} about the user",
        confidence=0.8,
        evidence_quote="quote",
        source_message_ids=("m1",),
        run_id="r1",
        thread_id="th",
        created_at=AT,
        updated_at=AT + timedelta(seconds=i),
        status=MemoryStatus.ACTIVE if active else MemoryStatus.SUPERSEDED,
    )


def seed(client: Any, memories: list[Memory]) -> None:
    for start in range(0, len(memories), 25):
        chunk = memories[start : start + 25]
        client.batch_write_item(RequestItems={TABLE: [{"PutRequest": {"Item": _to_item(m)}} for m in chunk]})


async def read_cost(aws: Any, stored: int, active: int) -> tuple[int, float, int]:
    # the newest ``active`` memories are active; the rest is history (superseded)
    seed(aws, [memory(i, active=i >= stored - active) for i in range(stored)])
    reads = Reads(aws)
    found = await ActiveMemories(DynamoDBMemoryStore(TABLE, lambda: reads)).relevant_active(
        ALICE, "fact number", limit=20
    )
    aws.delete_table(TableName=TABLE)
    from shared.adapters.aws.table_schema import create_table

    create_table(aws, TABLE)
    return reads.requests, reads.read_units, len(found)


async def test_the_memory_read_costs_the_same_for_10_and_10000_stored_memories(aws: Any) -> None:
    # GIVEN a user with 10 memories, and one with 10,000 of which the same 10 are active (the rest superseded)
    small = await read_cost(aws, stored=10, active=10)
    large = await read_cost(aws, stored=10_000, active=10)
    # THEN the worker's read takes the same requests and read units, and finds the same 10
    assert small == large == (1, small[1], 10)


async def test_the_memory_read_is_bounded_when_every_memory_is_active(aws: Any) -> None:
    requests, units, found = await read_cost(aws, stored=10_000, active=10_000)
    assert requests == 1 and found == 20
    bounded = await read_cost(aws, stored=MEMORY_CANDIDATES, active=MEMORY_CANDIDATES)
    assert (requests, units) == bounded[:2]

"""Memory items as earlier releases wrote them, a seeded table of them, and a count of the writes made to it.

- ``before_index``: the shape written before the bounded memory read (no ``GSI1PK``/``GSI1SK``, no ``schema_v``):
  what migration 1 exists for. Copied from ``_to_item`` as it was then (git: "Bounded memory reads").
- ``before_versions``: the shape written after the bounded read and before item versions (index attributes on an
  active memory, no ``schema_v``): migration 1 leaves it as it is.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.memory_store import active_memories_gsi, memory_pk
from shared.memory.models import Memory, MemoryKind, MemoryStatus

AT = datetime(2026, 1, 1, tzinfo=UTC)


def memory(i: int, *, user: str, active: bool, tenant: str = "tenant-m") -> Memory:
    return Memory(
        id=f"mem_{i:05d}",
        tenant_id=tenant,
        user_id=user,
        kind=MemoryKind.PREFERENCE,
        content=f"fact number {i} about {user}",
        confidence=0.8,
        evidence_quote="quote",
        source_message_ids=("m1",),
        run_id="r1",
        thread_id="th",
        created_at=AT,
        updated_at=AT + timedelta(seconds=i),
        status=MemoryStatus.ACTIVE if active else MemoryStatus.SUPERSEDED,
    )


def before_index(m: Memory) -> dict[str, Any]:
    return codec.to_item(
        {
            "PK": memory_pk(m.tenant_id, m.user_id),
            "SK": m.id,
            "kind": "memory",
            "status": m.status.value,
            "data": m.model_dump_json(),
        }
    )


def before_versions(m: Memory) -> dict[str, Any]:
    item = before_index(m)
    if m.is_active:
        item |= codec.to_item(
            {"GSI1PK": active_memories_gsi(m.tenant_id, m.user_id), "GSI1SK": f"{m.updated_at.isoformat()}#{m.id}"}
        )
    return item


def seed(client: Any, table: str, items: Iterable[dict[str, Any]]) -> int:
    """Batch writes of 25 (moto answers every item; a real table may leave some unprocessed)."""
    batch: list[dict[str, Any]] = []
    count = 0
    for item in items:
        batch.append({"PutRequest": {"Item": item}})
        if len(batch) == 25:
            client.batch_write_item(RequestItems={table: batch})
            count, batch = count + 25, []
    if batch:
        client.batch_write_item(RequestItems={table: batch})
        count += len(batch)
    return count


class WriteCounter:
    """Counts the ``PutItem`` calls a client made, per item key, as they came back: written or refused (botocore
    hooks on the client, so it sees exactly what the code sent, through whatever wraps the client)."""

    def __init__(self, client: Any) -> None:
        self.written: Counter[tuple[str, str]] = Counter()
        self.refused: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        watch_puts(client, self._count)

    def _count(self, key: tuple[str, str], written: bool) -> None:
        with self._lock:
            (self.written if written else self.refused)[key] += 1

    @property
    def twice(self) -> list[tuple[str, str]]:
        return [key for key, n in self.written.items() if n > 1]


class Seeded:
    """A table of ``n`` memories over ``users`` users in the three shapes, as a table upgraded from the oldest
    release holds them, interleaved in time (a user may have written nothing since the upgrade): of each user's
    memories, 7 in 10 were written before the bounded read, 2 after it but before versions, 1 by this code; 3 in 5
    are active. Only the old-shape active ones need migration 1 to write them."""

    def __init__(self, n: int, users: int = 20) -> None:
        from shared.adapters.aws.memory_store import _to_item

        self.memories: dict[tuple[str, str], Memory] = {}
        self.items: list[dict[str, Any]] = []
        self.needs_change: set[tuple[str, str]] = set()
        shapes = (before_index,) * 7 + (before_versions,) * 2 + (_to_item,)
        for i in range(n):
            nth = i // users  # the user's nth memory
            m = memory(i, user=f"user-{i % users:02d}", active=nth // 10 % 5 < 3)
            key = (memory_pk(m.tenant_id, m.user_id), m.id)
            self.memories[key] = m
            shape = shapes[nth % 10]
            self.items.append(shape(m))
            if shape is before_index and m.is_active:
                self.needs_change.add(key)
        # items of other kinds that no migration of memories may touch
        self.items += [
            codec.to_item({"PK": f"T#tenant-m#TH#th-{i}", "SK": "META", "kind": "thread", "owner_user_id": "user-00"})
            for i in range(n // 20)
        ]

    def users(self) -> list[str]:
        return sorted({m.user_id for m in self.memories.values()})

    def newest_active(self, user: str, limit: int) -> list[str]:
        """Ids of the user's ``limit`` most recently updated active memories, as ``list_active`` answers."""
        mine = [m for m in self.memories.values() if m.user_id == user and m.is_active]
        return [m.id for m in sorted(mine, key=lambda m: (m.updated_at, m.id), reverse=True)[:limit]]


def watch_puts(client: Any, seen: Callable[[tuple[str, str], bool], None]) -> None:
    """Call ``seen(key, written)`` for each ``PutItem`` the client gets an answer to (the key travels in the
    request's context from the parameters to the answer)."""

    def before(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["put_key"] = (params["Item"]["PK"]["S"], params["Item"]["SK"]["S"])

    def after(http_response: Any, context: dict[str, Any], **_: Any) -> None:
        seen(context["put_key"], http_response.status_code == 200)

    client.meta.events.register("before-parameter-build.dynamodb.PutItem", before)
    client.meta.events.register("after-call.dynamodb.PutItem", after)

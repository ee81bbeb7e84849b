"""The memory store in memory: the reference implementation of the port ``shared.memory.ports.MemoryStore``.

Besides memories, the store keeps the per-thread extraction cursor: the ``seq`` of the last thread message the
memory executor has processed, so each message is read as *new* once (the context windows of consecutive runs
overlap; re-reading them is how memory systems fill up with duplicates).
"""

from __future__ import annotations

from shared.memory.models import Deactivation, Memory
from shared.models import utc_now


class InMemoryMemoryStore:
    """The reference implementation (unit tests, the evaluation harness)."""

    def __init__(self) -> None:
        self._memories: dict[tuple[str, str, str], Memory] = {}
        self._cursors: dict[tuple[str, str], int] = {}

    async def list_memories(self, tenant_id: str, user_id: str, *, include_inactive: bool = False) -> list[Memory]:
        mine = [
            m
            for (t, u, _), m in self._memories.items()
            if t == tenant_id and u == user_id and (include_inactive or m.is_active)
        ]
        return sorted(mine, key=lambda m: (m.created_at, m.id), reverse=True)

    async def list_active(self, tenant_id: str, user_id: str, *, limit: int) -> list[Memory]:
        mine = [m for (t, u, _), m in self._memories.items() if t == tenant_id and u == user_id and m.is_active]
        return sorted(mine, key=lambda m: (m.updated_at, m.id), reverse=True)[:limit]

    async def get(self, tenant_id: str, user_id: str, memory_id: str) -> Memory | None:
        return self._memories.get((tenant_id, user_id, memory_id))

    async def put(self, memory: Memory) -> None:
        self._memories[(memory.tenant_id, memory.user_id, memory.id)] = memory

    async def deactivate(self, tenant_id: str, user_id: str, memory_id: str, change: Deactivation) -> Memory | None:
        current = self._memories.get((tenant_id, user_id, memory_id))
        if current is None or not current.is_active:
            return None
        updated = change.applied_to(current, utc_now())
        self._memories[(tenant_id, user_id, memory_id)] = updated
        return updated

    async def delete(self, tenant_id: str, user_id: str, memory_id: str) -> bool:
        return self._memories.pop((tenant_id, user_id, memory_id), None) is not None

    async def get_cursor(self, tenant_id: str, thread_id: str) -> int:
        return self._cursors.get((tenant_id, thread_id), 0)

    async def advance_cursor(self, tenant_id: str, thread_id: str, seq: int) -> None:
        key = (tenant_id, thread_id)
        self._cursors[key] = max(self._cursors.get(key, 0), seq)

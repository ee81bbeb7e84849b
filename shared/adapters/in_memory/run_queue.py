"""In-memory fake of :class:`~shared.ports.run_queue.RunQueue` (unit tests, ``make dev`` without AWS).

Answers as the DynamoDB adapter does: tests/contract/test_run_queue_contract.py runs both.
"""

from __future__ import annotations

from shared.ports.run_queue import QueuedRun, QueuedRunRef


class InMemoryRunQueue:
    def __init__(self) -> None:
        self._queues: dict[tuple[str, str], list[QueuedRun]] = {}

    async def enqueue(self, tenant_id: str, thread_id: str, entry: QueuedRun, *, depth: int) -> int | None:
        queue = self._queues.setdefault((tenant_id, thread_id), [])
        for position, queued in enumerate(queue, start=1):
            if queued.run_id == entry.run_id:
                return position
        if len(queue) >= depth:
            return None
        queue.append(entry)
        return len(queue)

    async def entries(self, tenant_id: str, thread_id: str) -> list[QueuedRun]:
        return list(self._queues.get((tenant_id, thread_id), []))

    async def remove(self, tenant_id: str, thread_id: str, run_id: str) -> bool:
        queue = self._queues.get((tenant_id, thread_id), [])
        for index, queued in enumerate(queue):
            if queued.run_id == run_id:
                del queue[index]
                return True
        return False

    async def find(self, tenant_id: str, run_id: str) -> QueuedRunRef | None:
        for (tenant, thread_id), queue in self._queues.items():
            for queued in queue:
                if tenant == tenant_id and queued.run_id == run_id:
                    return QueuedRunRef(thread_id=thread_id, user_id=queued.user_id)
        return None

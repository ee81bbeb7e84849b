"""The run queue's port: the runs waiting for a busy thread (the ``enqueue`` multitask strategy), in order.

A queued run is an accepted request that has not started: who sent it and its body, kept until the thread is free
and its turn comes (``shared.runs.queueing``). The order is the store's, so it holds across instances: first in,
first out by admission. The depth of a thread's queue is bounded atomically by the store.

Fake: ``InMemoryRunQueue`` (shared/adapters/in_memory/run_queue.py); adapter: ``DynamoDBRunQueue``
(shared/adapters/aws/run_queue.py); contract: tests/contract/test_run_queue_contract.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class QueuedRun:
    """One waiting run: its id, its caller, the request body that will start it, and until when the request that
    queued it waits to start it itself (epoch seconds; after that, whoever frees the thread starts it)."""

    run_id: str
    user_id: str
    scopes: tuple[str, ...]
    body: bytes
    enqueued_at: datetime
    waiter_until: float


def queued_run(user_id: str, scopes: frozenset[str], run_id: str, body: bytes, *, waiter_until: float) -> QueuedRun:
    """The entry of a request queued now by ``user_id`` (its scopes kept, in order, to admit it as that caller)."""
    return QueuedRun(
        run_id=run_id,
        user_id=user_id,
        scopes=tuple(sorted(scopes)),
        body=body,
        enqueued_at=datetime.now(UTC),
        waiter_until=waiter_until,
    )


@dataclass(frozen=True, slots=True)
class QueuedRunRef:
    """A queued run found by its id: its thread and its caller."""

    thread_id: str
    user_id: str


class RunQueue(Protocol):
    """The queued runs of each thread, oldest first.

    Fake: ``InMemoryRunQueue``; adapter: ``DynamoDBRunQueue``; contract: tests/contract/test_run_queue_contract.py."""

    async def enqueue(self, tenant_id: str, thread_id: str, entry: QueuedRun, *, depth: int) -> int | None:
        """Append ``entry`` unless the thread already has ``depth`` queued runs (then None, nothing stored).
        Returns its position (1 = next). An entry whose run id is queued already keeps its place (a retry)."""
        ...

    async def entries(self, tenant_id: str, thread_id: str) -> list[QueuedRun]:
        """The thread's queued runs, oldest first."""
        ...

    async def remove(self, tenant_id: str, thread_id: str, run_id: str) -> bool:
        """Take the run out of the queue (it started, or will never start); True when this call removed it."""
        ...

    async def find(self, tenant_id: str, run_id: str) -> QueuedRunRef | None:
        """Where a queued run waits (its thread) and whose it is; None when it is not queued."""
        ...


class QueueStarter(Protocol):
    """Has work of a run started outside any request: a thread's queued runs (background runs,
    ``shared.runs.background``) and the next slice of a run (``shared.runs.slices``). On
    AWS an asynchronous invocation of the background-run function (``LambdaQueueStarter``), in ``make dev`` a task
    of the same process (``InProcessQueueStarter``). Either drains the thread's queue (``ThreadQueue.drain``).

    Contract: tests/contract/test_queue_starter_contract.py."""

    async def start_queue(self, tenant_id: str, thread_id: str) -> None:
        """Ask for the thread's queue to be drained; returns once the request is accepted (not when the runs end).
        Raises when it cannot be accepted (the caller then takes its entry back)."""
        ...

    async def continue_run(self, ticket: Mapping[str, Any]) -> None:
        """Have a run that reached its slice's end go on in a new invocation, from its ticket (the JSON form of
        ``shared.runs.slices.SliceTicket``); returns once the request is accepted. Raises when it cannot be."""
        ...

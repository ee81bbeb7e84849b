"""The memory ports: the memory store, the pending-extraction marker, the due queue, embeddings and the event bus.

Their value types live in ``shared.memory.models`` (which imports no port).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from shared.memory.models import (
    BusEvent,
    Deactivation,
    ExtractionDue,
    Memory,
    PendingExtraction,
    PublishFailure,
)


class MemoryStore(Protocol):
    """A user's memories, and the per-thread extraction cursor: the ``seq`` of the last thread message the memory
    executor has processed, so each message is read as *new* once.

    Fake: ``InMemoryMemoryStore`` (shared/adapters/in_memory/memories.py); adapter: ``DynamoDBMemoryStore``
    (shared/adapters/aws/memory_store.py); contract: tests/contract/test_memory_store_contract.py."""

    async def list_memories(self, tenant_id: str, user_id: str, *, include_inactive: bool = False) -> list[Memory]:
        """The user's memories, newest first; only active ones unless ``include_inactive``."""
        ...

    async def list_active(self, tenant_id: str, user_id: str, *, limit: int) -> list[Memory]:
        """The user's ``limit`` most recently updated active memories, newest first: a bounded read, whatever
        the user's history of memories (what the worker reads on every run)."""
        ...

    async def get(self, tenant_id: str, user_id: str, memory_id: str) -> Memory | None:
        """The user's memory with this id; None when absent or someone else's (the key includes the user)."""
        ...

    async def put(self, memory: Memory) -> None:
        """Create or replace a memory (the gate's writes and merges)."""
        ...

    async def deactivate(self, tenant_id: str, user_id: str, memory_id: str, change: Deactivation) -> Memory | None:
        """Mark an **active** memory superseded or retracted, with why and on what evidence. Returns the updated
        memory, or None when there is no active memory with this id for this user. Never deletes."""
        ...

    async def delete(self, tenant_id: str, user_id: str, memory_id: str) -> bool:
        """Remove a memory for real (only the user's own ``DELETE /memories/{id}``). False when absent."""
        ...

    async def get_cursor(self, tenant_id: str, thread_id: str) -> int:
        """The ``seq`` of the last message extraction has processed on this thread (0: none)."""
        ...

    async def advance_cursor(self, tenant_id: str, thread_id: str, seq: int) -> None:
        """Move the cursor forward to ``seq``; never moves it back."""
        ...


class PendingExtractions(Protocol):
    """The per-thread marker of a pending memory extraction (its generation), and the lease of the memory run doing
    it (see shared/adapters/in_memory/pending_extractions.py for how the marker debounces a burst of turns).

    Fake: ``InMemoryPendingExtractions`` (shared/adapters/in_memory/pending_extractions.py); adapter:
    ``DynamoDBPendingExtractions`` (shared/adapters/aws/memory_pending.py); contract:
    tests/contract/test_pending_extractions_contract.py."""

    async def note(self, tenant_id: str, user_id: str, thread_id: str, *, now: datetime) -> int:
        """Record a run-completed event for the thread; returns the thread's new generation (1, 2, ...)."""
        ...

    async def get(self, tenant_id: str, thread_id: str) -> PendingExtraction | None:
        """The thread's marker (None: nothing was ever noted, or it was cancelled)."""
        ...

    async def acquire(
        self, tenant_id: str, thread_id: str, run_id: str, *, now: datetime, lease_until: datetime
    ) -> bool:
        """Take the thread's run lease for ``run_id``: True when no other run holds an unexpired lease and the
        marker exists (a cancelled thread cannot start a run). Taking it again for the same run id succeeds."""
        ...

    async def hold(
        self, tenant_id: str, user_id: str, thread_id: str, run_id: str, *, now: datetime, lease_until: datetime
    ) -> bool:
        """Take the run lease like :meth:`acquire`, creating the marker (generation 0, nothing noted) when the
        thread has none: for a memory run that does not come from a noted turn (an automation task with a memory
        profile), so it and the coalescer's runs exclude each other. It does not move the generation: a pending
        due message still fires later, and finds nothing new after the cursor if this run took it all."""
        ...

    async def release(self, tenant_id: str, thread_id: str, run_id: str) -> None:
        """Give the lease back (only when ``run_id`` holds it)."""
        ...

    async def cancel_thread(self, tenant_id: str, thread_id: str) -> None:
        """Forget the thread's marker: pending extraction is cancelled (thread deletion)."""
        ...

    async def cancel_user(self, tenant_id: str, user_id: str, *, now: datetime) -> None:
        """Cancel every extraction of the user's threads noted up to ``now`` (user deletion)."""
        ...

    async def user_cancelled_at(self, tenant_id: str, user_id: str) -> datetime | None:
        """When the user's pending extractions were last cancelled (None: never)."""
        ...


class DueQueue(Protocol):
    """Delayed "extraction due" messages for the memory consumer (SQS ``DelaySeconds`` in AWS).

    Fake: ``InMemoryDueQueue`` (shared/adapters/in_memory/due_queue.py); adapter: ``SqsDueQueue``
    (shared/adapters/aws/sqs_due_queue.py); contract: tests/contract/test_due_queue_contract.py."""

    async def send(self, due: ExtractionDue, *, delay_s: int) -> None:
        """Deliver ``due`` to the memory consumer after ``delay_s`` seconds (0-900)."""
        ...


class Embedder(Protocol):
    """Text embeddings, to recognise two memory texts that state the same fact (see shared/memory/embeddings.py).

    Fake: ``LexiconEmbedder`` (shared/memory/embeddings.py, also the default without an embeddings endpoint);
    adapter: ``OpenAIEmbedder`` (shared/adapters/openai_embeddings.py); contract:
    tests/contract/test_embedder_contract.py."""

    model: str
    duplicate_similarity: float
    """The cosine similarity from which two memory texts are the same fact (depends on the model)."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in order; one request for the whole batch."""
        ...


class EventPublisher(Protocol):
    """The event bus (the ``agent.run.completed`` events memory extraction listens to).

    Fake: ``InMemoryEventPublisher`` (shared/adapters/in_memory/publisher.py); adapter: ``EventBridgePublisher``
    (shared/adapters/aws/eventbridge.py); contract: tests/contract/test_event_publisher_contract.py."""

    async def publish(self, events: Sequence[BusEvent]) -> list[PublishFailure]:
        """Put the events on the bus in one call; returns the entries that failed (empty: all accepted)."""
        ...

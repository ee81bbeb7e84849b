"""Ports: the small async interfaces the executors and the API depend on.

Adapters live in ``shared.adapters`` (DynamoDB, Redis) and ``shared.llm`` (models); in-memory fakes implement the
same protocols and run the same contract suites (``tests/contract``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from shared.models import AuditRecord, Identity, Message, Run, Thread, Usage


@dataclass(frozen=True)
class StreamEntry:
    """One event in a run's or thread's stream; ``id`` is the stream entry id (the SSE ``id:``)."""

    id: str
    event: dict[str, Any]
    json: str | None = None
    """The event's JSON text as stored (``event`` decoded from it), written into SSE frames as it is."""


class MessageHistoryReader(Protocol):
    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        """Up to ``limit`` messages older than ``before_seq`` (all when None), newest first. One store request."""
        ...


class ConversationStore(MessageHistoryReader, Protocol):
    async def open_thread(self, identity: Identity, thread_id: str) -> Thread:
        """Return the caller's thread, creating it; raises NotFound if it belongs to another user or tenant."""
        ...

    async def get_thread(self, identity: Identity, thread_id: str) -> Thread:
        """The caller's thread; NotFound when absent or not theirs."""
        ...

    async def list_threads(
        self, identity: Identity, *, limit: int, cursor: str | None
    ) -> tuple[list[Thread], str | None]: ...

    async def append_messages(self, identity: Identity, thread_id: str, messages: Sequence[Message]) -> list[Message]:
        """Append in order, idempotent by message id; returns only the messages newly stored, with their seq."""
        ...

    async def known_message_ids(self, tenant_id: str, thread_id: str, ids: Sequence[str]) -> set[str]: ...

    async def read_forward(self, tenant_id: str, thread_id: str, *, after_seq: int, limit: int) -> list[Message]:
        """Up to ``limit`` messages with ``seq > after_seq``, oldest first."""
        ...


class RunLedger(Protocol):
    async def create_run(self, run: Run) -> tuple[Run, bool]:
        """Store a new run; returns (run, True), or (the existing run with that id, False)."""
        ...

    async def get_run(self, tenant_id: str, run_id: str) -> Run | None: ...

    async def finish_run(
        self,
        tenant_id: str,
        run_id: str,
        *,
        status: str,
        usage: list[Usage],
        last_stream_id: str | None,
        error_code: str | None = None,
    ) -> None: ...

    async def heartbeat(self, tenant_id: str, run_id: str, *, last_stream_id: str | None) -> Run:
        """Renew the run's lease (one write); returns the record as written (cancel flag, status)."""
        ...


class AuditLog(Protocol):
    async def record(self, record: AuditRecord) -> None: ...

    async def list_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[AuditRecord]: ...


class EventStream(Protocol):
    async def append(self, key: str, event: dict[str, Any]) -> str:
        """Append one event; returns its stream entry id. An ``EncodedEvent`` (shared.event_json) is stored as the
        text it carries, not encoded again."""
        ...

    async def read_after(self, key: str, after_id: str, *, block_ms: int, count: int = 100) -> list[StreamEntry]:
        """Entries strictly after ``after_id`` (``"0-0"`` for all), waiting up to ``block_ms`` for the first."""
        ...

    async def expire(self, key: str, seconds: int) -> None: ...


@runtime_checkable
class BatchEventStream(Protocol):
    """An event stream that appends many events in one round trip (Redis: a pipeline)."""

    async def append_batch(
        self, entries: Sequence[tuple[str, dict[str, Any]]], *, clear: str | None = None
    ) -> list[str]:
        """Append ``(key, event)`` pairs in order, after deleting the key ``clear`` when given; their entry ids.
        On an exception none counts as written (as with one append that fails, some may be there: a retry can
        repeat them)."""
        ...

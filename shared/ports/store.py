"""The conversation store's ports: threads and their messages, run records and audit records (one DynamoDB table).

Fake: ``InMemoryStore`` (shared/adapters/in_memory_store.py); adapter: ``DynamoDBStore``
(shared/adapters/aws/dynamodb_store.py); contract: tests/contract/test_store_contract.py (and test_retention.py).
What one component needs of the whole store (``SweepStore``, ``RunStore``) is declared next to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from shared.models import AuditRecord, Identity, Message, Run, Thread, ThreadClaim, ThreadTakeover, Usage


class MessageHistoryReader(Protocol):
    """Reads a thread backwards, a page at a time (the context window's only read).

    Fake: ``InMemoryStore``; adapter: ``DynamoDBStore``; contract: tests/contract/test_store_contract.py."""

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        """Up to ``limit`` messages older than ``before_seq`` (all when None), newest first. One store request."""
        ...


class ConversationStore(MessageHistoryReader, Protocol):
    """Threads and their messages, appended idempotently by message id.

    Fake: ``InMemoryStore``; adapter: ``DynamoDBStore``; contract: tests/contract/test_store_contract.py."""

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
    """The run records: one per run id, finished once, their lease renewed by heartbeats.

    Fake: ``InMemoryStore``; adapter: ``DynamoDBStore``; contract: tests/contract/test_store_contract.py."""

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
    """Audit records, per thread.

    Fake: ``InMemoryStore``; adapter: ``DynamoDBStore``; contract: tests/contract/test_store_contract.py."""

    async def record(self, record: AuditRecord) -> None: ...

    async def list_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[AuditRecord]: ...


class SweepStore(ConversationStore, RunLedger, AuditLog, Protocol):
    """The store as the stale-run sweeper uses it (shared/runs/sweeper.py). Fake: ``InMemoryStore``; adapter:
    ``DynamoDBStore``; suite: tests/contract/test_store_contract.py."""

    async def list_stale_runs(self, *, stale_before: datetime, limit: int) -> list[Run]: ...

    async def abandon_run(self, tenant_id: str, run_id: str, *, stale_before: datetime, error_code: str) -> bool: ...

    async def release_thread(self, tenant_id: str, thread_id: str, run_id: str) -> None: ...


class AdmittedRun(NamedTuple):
    """What ``admit_messages`` did: the run (the stored one when it existed already), whether this call created it,
    and the messages it stored, numbered and exactly as a read returns them (content capped), oldest first."""

    run: Run
    created: bool
    messages: list[Message]


class RunStore(SweepStore, Protocol):
    """The store as the run service uses it: the sweeper's part plus the thread claims and the admission write.
    Fake: ``InMemoryStore``; adapter: ``DynamoDBStore``; suite: tests/contract/test_store_contract.py."""

    async def claim_thread(self, identity: Identity, thread_id: str, run_id: str, *, stale_before: Any) -> bool: ...

    async def open_and_claim(
        self, identity: Identity, thread_id: str, run_id: str, *, stale_before: Any
    ) -> ThreadClaim | None: ...

    async def admit_messages(
        self, identity: Identity, thread_id: str, messages: Sequence[Message], run: Run, *, last_seq: int
    ) -> AdmittedRun: ...

    async def forget_thread(self, identity: Identity, thread_id: str, run_id: str) -> None: ...

    async def take_over_thread(
        self, identity: Identity, thread_id: str, run_id: str, *, lease_expired_before: Any
    ) -> ThreadTakeover | None: ...

    async def request_cancel(self, tenant_id: str, run_id: str) -> None: ...

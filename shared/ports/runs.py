"""The run ledger's port: one record per run id, finished once, its lease renewed by heartbeats.

Fake: ``InMemoryRunLedger`` (shared/adapters/in_memory/runs.py); adapter: ``DynamoDBRunLedger``
(shared/adapters/aws/runs.py); contract: tests/contract/test_run_ledger_contract.py. The events of a run are in its
Redis stream (``shared.ports.streams``); this ledger is their durable index: status, usage, last stream id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from shared.models import Run, Usage


@dataclass(frozen=True, slots=True)
class RunPosition:
    """Where a page of a thread's runs (newest first) continues: below the run created at ``created_at`` with id
    ``run_id``."""

    created_at: datetime
    run_id: str


class RunLedger(Protocol):
    """The run records: one per run id, finished once, their lease renewed by heartbeats.

    Fake: ``InMemoryRunLedger``; adapter: ``DynamoDBRunLedger``; contract:
    tests/contract/test_run_ledger_contract.py."""

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
        pending_tool_call_ids: Sequence[str] = (),
        interrupts: Sequence[dict[str, Any]] = (),
    ) -> None:
        """Record the run's end; ``pending_tool_call_ids`` and ``interrupts``: what its outcome left open."""
        ...

    async def heartbeat(self, tenant_id: str, run_id: str, *, last_stream_id: str | None) -> Run:
        """Renew the run's lease (one write); returns the record as written (cancel flag, status)."""
        ...

    async def request_cancel(self, tenant_id: str, run_id: str) -> None: ...

    async def list_stale_runs(self, *, stale_before: datetime, limit: int) -> list[Run]:
        """Running runs, of every tenant, whose last heartbeat is older than ``stale_before`` (for the sweeper)."""
        ...

    async def abandon_run(self, tenant_id: str, run_id: str, *, stale_before: datetime, error_code: str) -> bool:
        """End a still-running run whose heartbeat is older than ``stale_before``; True when this call ended it."""
        ...

    async def list_runs_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[Run]:
        """The thread's first ``limit`` runs, oldest first (the audit)."""
        ...

    async def page_thread_runs(
        self, tenant_id: str, thread_id: str, *, limit: int, below: RunPosition | None = None
    ) -> list[Run]:
        """The thread's runs newest first: at most ``limit``, those older than ``below`` when given."""
        ...

"""What a component that spans the aggregates of the main table needs of them: roles, not ports.

The table holds three aggregates, each behind its own port: threads and messages (``shared.ports.threads``), runs
(``shared.ports.runs``) and the audit log (``shared.ports.audit``). The run service and the stale-run sweeper use
all three, so their store is the sum of those ports, declared here; every other component asks for one port.
Both ``AggregateStore`` (shared/adapters/aggregate_store.py, over the DynamoDB or the in-memory adapters) and
anything with the same methods satisfy these roles.
"""

from __future__ import annotations

from typing import Protocol

from shared.ports.audit import AuditLog
from shared.ports.runs import RunLedger
from shared.ports.threads import AdmittedRun, ConversationStore, MessageHistoryReader, ThreadStore

__all__ = [
    "AdmittedRun",
    "AuditLog",
    "ConversationStore",
    "MessageHistoryReader",
    "RunLedger",
    "RunStore",
    "SweepStore",
    "ThreadStore",
]


class SweepStore(ConversationStore, RunLedger, AuditLog, Protocol):
    """The store as the stale-run sweeper uses it (shared/runs/sweeper.py): the three ports, and the thread's
    release."""

    async def release_thread(self, tenant_id: str, thread_id: str, run_id: str) -> None: ...


class RunStore(SweepStore, ThreadStore, Protocol):
    """The store as the run service uses it: the sweeper's part plus the thread claims and the admission write."""

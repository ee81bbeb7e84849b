"""The in-memory fakes of the main table's three aggregates, as one store for the components that span them.

``InMemoryStore()`` is what most tests hand the composition root (``ServiceOverrides(store=...)``): threads and
messages, the run ledger and the audit log, sharing one request meter, behind ``AggregateStore``.
"""

from __future__ import annotations

from shared.adapters.aggregate_store import AggregateStore
from shared.adapters.in_memory.audit import InMemoryAuditLog
from shared.adapters.in_memory.meter import RequestMeter
from shared.adapters.in_memory.runs import InMemoryRunLedger
from shared.adapters.in_memory.threads import MAX_CONTENT_CHARS, InMemoryThreads

__all__ = ["MAX_CONTENT_CHARS", "InMemoryStore"]


class InMemoryStore(AggregateStore, RequestMeter):
    """The three fakes over one meter: ``request_count`` counts the requests of all three."""

    threads: InMemoryThreads
    runs: InMemoryRunLedger
    audit: InMemoryAuditLog

    def __init__(self) -> None:
        RequestMeter.__init__(self)
        runs = InMemoryRunLedger(self)
        AggregateStore.__init__(self, InMemoryThreads(runs, self), runs, InMemoryAuditLog(self))

"""The in-memory fakes of the main table's three aggregates, built together over one request meter.

``InMemoryStore()`` is what most tests hand the composition root (``ServiceOverrides(store=...)``, a
``shared.wiring.MainTable``): threads and messages (``threads``), the run ledger (``runs``) and the audit log
(``audit``). It holds the three and forwards nothing: each component is given the one it uses.
"""

from __future__ import annotations

from shared.adapters.in_memory.audit import InMemoryAuditLog
from shared.adapters.in_memory.meter import RequestMeter
from shared.adapters.in_memory.runs import InMemoryRunLedger
from shared.adapters.in_memory.thread_records import MAX_CONTENT_CHARS
from shared.adapters.in_memory.threads import InMemoryThreads

__all__ = ["MAX_CONTENT_CHARS", "InMemoryStore"]


class InMemoryStore(RequestMeter):
    """The three fakes over one meter: ``request_count`` counts the requests of all three. The threads fake writes
    run records through the ledger beside it, as the DynamoDB adapter does in the admission's transaction."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = InMemoryRunLedger(self)
        self.threads = InMemoryThreads(self.runs, self)
        self.audit = InMemoryAuditLog(self)

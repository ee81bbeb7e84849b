"""In-memory audit log: the reference fake of ``AuditLog`` (shared/ports/audit.py).

It runs the same contract suite as ``DynamoDBAuditLog`` (tests/contract/test_audit_log_contract.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from shared.adapters.in_memory.meter import RequestMeter
from shared.models import AuditRecord

ThreadKey = tuple[str, str]


@dataclass(frozen=True)
class _AuditEntry:
    record: AuditRecord
    order: int


class InMemoryAuditLog:
    """Audit records per (tenant, thread), oldest first."""

    def __init__(self, meter: RequestMeter | None = None) -> None:
        self._audit: dict[ThreadKey, list[_AuditEntry]] = {}
        self._audit_order = itertools.count()
        self._meter = meter or RequestMeter()

    @property
    def request_count(self) -> int:
        return self._meter.request_count

    async def record(self, record: AuditRecord) -> None:
        await self._meter.request()
        entries = self._audit.setdefault((record.tenant_id, record.thread_id), [])
        entries.append(_AuditEntry(record.model_copy(deep=True), next(self._audit_order)))

    async def list_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[AuditRecord]:
        """Oldest first."""
        await self._meter.request()
        entries = sorted(self._audit.get((tenant_id, thread_id), []), key=lambda e: (e.record.at.isoformat(), e.order))
        return [e.record.model_copy(deep=True) for e in entries[:limit]]

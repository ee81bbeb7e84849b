"""The audit log's port: append-only records of tool decisions, erasures and sweeps, per thread.

Fake: ``InMemoryAuditLog`` (shared/adapters/in_memory/audit.py); adapter: ``DynamoDBAuditLog``
(shared/adapters/aws/audit.py); contract: tests/contract/test_audit_log_contract.py.
"""

from __future__ import annotations

from typing import Protocol

from shared.models import AuditRecord


class AuditLog(Protocol):
    """Audit records, per thread.

    Fake: ``InMemoryAuditLog``; adapter: ``DynamoDBAuditLog``; contract: tests/contract/test_audit_log_contract.py."""

    async def record(self, record: AuditRecord) -> None: ...

    async def list_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[AuditRecord]: ...

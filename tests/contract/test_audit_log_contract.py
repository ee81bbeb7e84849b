"""Contract of the audit log port (``AuditLog``, shared/ports/audit.py): the same cases against
``InMemoryAuditLog`` and ``DynamoDBAuditLog`` (moto).

A case the DynamoDB adapter does not meet yet is marked ``xfail(strict=True)`` for that backend only, with the
reason, so the fake keeps the intended behaviour and the mark fails loudly once the adapter is fixed. Cases that
need another aggregate (a run to admit, a thread to audit) reach it through the same table's store.
"""

from __future__ import annotations

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.in_memory.store import InMemoryStore
from tests.support.table_stores import (
    audit,
    table_store_fixture,  # noqa: F401  (the `store` fixture)
)

Store = InMemoryStore | DynamoDBStore


# ---- audit -------------------------------------------------------------------------------------------------


async def test_audit_records_round_trip_per_thread_oldest_first(store: Store) -> None:
    # GIVEN two records on t1 (written newest first) and one on t2
    later, earlier, other = audit("tool_denied", seconds=1), audit("tool_allowed"), audit("x", thread_id="t2")
    for record in (later, earlier, other):
        await store.audit.record(record)
    # WHEN listing t1's audit trail  THEN exactly its two records, equal to what was written, oldest first
    assert await store.audit.list_for_thread("tenant-a", "t1", limit=10) == [earlier, later]
    assert await store.audit.list_for_thread("tenant-a", "t1", limit=1) == [earlier]
    assert await store.audit.list_for_thread("tenant-a", "t2", limit=10) == [other]


async def test_audit_records_never_leak_across_tenants(store: Store) -> None:
    # GIVEN audit records on thread t1 in tenant-a and in tenant-b
    mine, theirs = audit("mine"), audit("theirs", tenant_id="tenant-b")
    await store.audit.record(mine)
    await store.audit.record(theirs)
    # WHEN each tenant lists t1  THEN each sees only its own
    assert await store.audit.list_for_thread("tenant-a", "t1", limit=10) == [mine]
    assert await store.audit.list_for_thread("tenant-b", "t1", limit=10) == [theirs]

"""One DynamoDB client per process: every adapter of the main table, the migration runner and the memory
function's idempotency records are built by the composition root around the same client (shared/wiring/stores.py)."""

from __future__ import annotations

from typing import Any

from shared.models import Identity, Message, Role
from shared.settings import Settings
from shared.wiring import Services
from tests.support.table_stores import TABLE

ALICE = Identity(tenant_id="tenant-a", user_id="alice")


def services_on_moto() -> Services:
    return Services(Settings(table_name=TABLE, aws_region="us-east-1", jwt_secret="x" * 40, auth_mode="hs256"))


async def test_every_table_adapter_shares_the_process_s_one_client(aws: Any) -> None:
    # GIVEN the services of one process, built from settings (no overrides)
    services = services_on_moto()
    store: Any = services.store
    # WHEN each adapter of the table has sent a request
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [Message(id="m1", thread_id="t1", role=Role.USER, content="hi")])
    assert await store.runs.get_run("tenant-a", "r-none") is None
    assert await store.audit.list_for_thread("tenant-a", "t1", limit=5) == []
    assert await services.memories.list_memories("tenant-a", "alice") == []
    assert services.migration_log is not None
    await services.migration_log.completed()
    assert await services.thread_states.read(ALICE, "t1") is None
    # THEN they all used the one client the composition root built, and so do the runner and idempotency records
    one = services.dynamodb_client
    adapters: list[Any] = [
        store.threads,
        store.runs,
        store.audit,
        services.memories,
        services.pending_extractions,
        services.automation_store,
        services.migration_log,
        services.thread_states,
        services.usage_counters,
    ]
    assert all(adapter.client is one for adapter in adapters)
    assert services.migration_runner()._client is one
    assert services.idempotency_records.client is one

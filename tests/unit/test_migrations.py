"""The migrations on fakes: migration 1 on plain items, the registry's rules, the cached status that ``/healthz``
and the memory store read, and the write budget. The runner on a table: tests/integration/test_migration_runner.py."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from functions.agent_api.app import create_app
from shared.adapters.aws.write_budget import WriteBudget, item_size, write_units
from shared.adapters.in_memory.migration_log import InMemoryMigrationLog
from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.memory.models import Memory, MemoryKind, MemoryStatus
from shared.migrations.memory_index import ACTIVE_MEMORY_INDEX
from shared.migrations.message_parents import MESSAGE_PARENTS
from shared.migrations.model import CompletedMigration, ItemFilter, Migration, item_version
from shared.migrations.registry import MIGRATIONS, check_registry, current_version
from shared.migrations.status import PendingMigrations
from shared.migrations.thread_list_index import THREAD_LIST_INDEX
from shared.migrations.thread_previews import THREAD_PREVIEWS
from shared.settings import Settings
from shared.wiring import ServiceOverrides, Services

AT = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
PK = "T#t1#U#alice#MEM"


def stored(status: MemoryStatus = MemoryStatus.ACTIVE, **extra: Any) -> dict[str, Any]:
    """A memory item as boto3 deserialises it, in the shape written before the bounded memory read."""
    memory = Memory(
        id="mem_1",
        tenant_id="t1",
        user_id="alice",
        kind=MemoryKind.PREFERENCE,
        content="Likes tea",
        confidence=0.8,
        evidence_quote="I like tea",
        created_at=AT,
        updated_at=AT + timedelta(minutes=5),
        status=status,
    )
    return {"PK": PK, "SK": "mem_1", "kind": "memory", "status": status.value, "data": memory.model_dump_json()} | extra


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


# ---------------------------------------------------------------------------------------------- migration 1
def test_an_active_memory_of_the_old_shape_gets_its_index_attributes() -> None:
    # GIVEN an active memory written before the bounded read (no GSI1 attributes)
    item = stored()
    # WHEN migration 1 applies to it
    new = ACTIVE_MEMORY_INDEX.apply(item)
    # THEN it is the same item with the index attributes the adapter writes today
    assert new == item | {"GSI1PK": f"{PK}#ACTIVE", "GSI1SK": "2026-01-01T12:05:00+00:00#mem_1"}


def test_items_already_in_the_new_shape_are_left_alone_and_stale_index_attributes_removed() -> None:
    indexed = stored(GSI1PK=f"{PK}#ACTIVE", GSI1SK="2026-01-01T12:05:00+00:00#mem_1")
    assert ACTIVE_MEMORY_INDEX.apply(indexed) is None  # written after the bounded read
    assert ACTIVE_MEMORY_INDEX.apply(stored(MemoryStatus.SUPERSEDED)) is None  # inactive: never indexed
    stale = stored(MemoryStatus.RETRACTED, GSI1PK=f"{PK}#ACTIVE", GSI1SK="x#mem_1")
    assert ACTIVE_MEMORY_INDEX.apply(stale) == stored(MemoryStatus.RETRACTED)  # leaves the index
    moved = stored(GSI1PK=f"{PK}#ACTIVE", GSI1SK="2025-01-01T00:00:00+00:00#mem_1")  # an older updated_at
    assert ACTIVE_MEMORY_INDEX.apply(moved) == stored() | {
        "GSI1PK": f"{PK}#ACTIVE",
        "GSI1SK": "2026-01-01T12:05:00+00:00#mem_1",
    }


def test_an_item_that_is_not_a_memory_is_not_selected() -> None:
    assert ACTIVE_MEMORY_INDEX.items.matches(stored())
    assert not ACTIVE_MEMORY_INDEX.items.matches({"PK": "T#t1#TH#th", "SK": "META", "kind": "thread"})
    narrowed = ItemFilter(kind="memory", key_prefix="T#t2#")
    assert not narrowed.matches(stored())


def old_thread(**extra: Any) -> dict[str, Any]:
    """A thread item as the release before wrote it: in GSI1, no version."""
    return {
        "PK": "T#t1#TH#th-1",
        "SK": "META",
        "kind": "thread",
        "tenant_id": "t1",
        "thread_id": "th-1",
        "owner_user_id": "u1",
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-02T00:00:00+00:00",
        "last_seq": Decimal(4),
        "GSI1PK": "T#t1#U#u1#THREADS",
        "GSI1SK": "2026-01-01T12:00:00+00:00#th-1",
        **extra,
    }


def test_migration_2_moves_a_thread_from_gsi1_to_the_thread_list_index_at_its_update_time() -> None:
    moved = THREAD_LIST_INDEX.apply(old_thread(active_run_id="r1"))
    assert moved is not None and "GSI1PK" not in moved and "GSI1SK" not in moved
    assert moved["GSI3PK"] == "T#t1#U#u1#THREADS"
    assert moved["GSI3SK"] == "2026-01-02T00:00:00+00:00#th-1"  # updated_at: a release by either release set it
    assert {k: v for k, v in moved.items() if not k.startswith("GSI")} == {
        k: v for k, v in old_thread(active_run_id="r1").items() if not k.startswith("GSI")
    }
    # an item already moved (by the app's claim, or a run of this migration) needs nothing
    assert THREAD_LIST_INDEX.apply(moved) is None
    assert THREAD_LIST_INDEX.apply({**moved, "schema_v": Decimal(2)}) is None
    assert THREAD_LIST_INDEX.items.matches(old_thread())
    assert not THREAD_LIST_INDEX.items.matches({"PK": "T#t1#TH#th-1", "SK": "STATE", "kind": "thread_state"})
    # every attribute the app changes on a thread guards the write
    assert {"last_seq", "active_run_id", "active_run_at", "updated_at"} <= set(THREAD_LIST_INDEX.guard)


def test_versions_absent_mean_one_and_the_app_writes_the_newest_version_of_each_kind() -> None:
    assert item_version(stored()) == 1
    assert item_version(stored(schema_v=Decimal(2))) == 2
    assert current_version("memory") == ACTIVE_MEMORY_INDEX.to_version == 2
    assert THREAD_LIST_INDEX.to_version == 2
    assert current_version("thread") == THREAD_PREVIEWS.to_version == 3
    assert current_version("message") == MESSAGE_PARENTS.to_version == 2
    assert [m.label for m in MIGRATIONS] == [
        "0001-active-memory-index",
        "0002-thread-list-index",
        "0003-message-parents",
        "0004-thread-previews",
    ]


def test_migration_3_links_a_message_to_the_one_stored_before_it() -> None:
    old = {"PK": "T#t#TH#th", "SK": "M#000000000002", "kind": "message", "id": "m2", "seq": Decimal(2)}
    assert MESSAGE_PARENTS.neighbour is not None and MESSAGE_PARENTS.apply_beside is not None
    assert MESSAGE_PARENTS.neighbour(old) == {"PK": "T#t#TH#th", "SK": "M#000000000001"}
    assert MESSAGE_PARENTS.migrate(old, lambda key: {"id": "m1"}) == {**old, "parent_id": "m1"}
    assert MESSAGE_PARENTS.migrate(old, lambda key: None) == {**old, "parent_id": ""}  # its predecessor is gone
    first = {**old, "SK": "M#000000000001", "id": "m1", "seq": Decimal(1)}
    assert MESSAGE_PARENTS.migrate(first, lambda key: None) == {**first, "parent_id": ""}
    assert MESSAGE_PARENTS.migrate({**old, "parent_id": "m1"}, lambda key: None) is None


@pytest.mark.parametrize(
    ("ids", "versions", "problem"),
    [((2,), (2,), "ids must be 1, 2, 3"), ((1, 2), (2, 2), "to_version must exceed 2"), ((1,), (1,), "exceed 1")],
)
def test_the_registry_refuses_ids_out_of_order_and_versions_that_do_not_grow(
    ids: tuple[int, ...], versions: tuple[int, ...], problem: str
) -> None:
    migrations = [
        Migration(i, f"m{i}", "", ItemFilter("memory"), v, lambda item: None)
        for i, v in zip(ids, versions, strict=True)
    ]
    with pytest.raises(ValueError, match=problem):
        check_registry(migrations)


# ---------------------------------------------------------------------------------------------- the status
async def test_the_status_is_read_at_most_once_per_ttl_and_never_again_once_nothing_is_pending() -> None:
    # GIVEN a log that has no migration completed yet, read through the cache with a 300 s lifetime
    log, clock = InMemoryMigrationLog(), Clock()
    pending = PendingMigrations(log, ttl_s=300, clock=clock)
    # WHEN it is asked many times within the lifetime
    answers = [(await pending.status()).pending for _ in range(10)]
    # THEN the table was read once, and every answer lists migrations 1 to 4
    labels = [
        "0001-active-memory-index",
        "0002-thread-list-index",
        "0003-message-parents",
        "0004-thread-previews",
    ]
    assert log.reads == 1 and answers == [labels] * 10
    # WHEN the migrations complete and the lifetime passes
    await log.record_completed(CompletedMigration(1, "active-memory-index", AT, 3, 10))
    await log.record_completed(CompletedMigration(2, "thread-list-index", AT, 2, 5))
    await log.record_completed(CompletedMigration(3, "message-parents", AT, 5, 10))
    await log.record_completed(CompletedMigration(4, "thread-previews", AT, 1, 5))
    clock.now += 301
    assert await pending.completed(1) and (await pending.status()).as_health() == {"pending": [], "checked": True}
    # THEN it is not read again, however long the process lives: a completed migration stays completed
    clock.now += 10_000
    assert await pending.completed(1) and (await pending.status()).pending == []
    assert log.reads == 2


async def test_a_failed_read_answers_at_once_counts_everything_pending_and_is_retried_later() -> None:
    log, clock = InMemoryMigrationLog(), Clock()
    log.fail_with = ConnectionError("table unreachable")
    pending = PendingMigrations(log, ttl_s=300, retry_s=30, clock=clock)
    status = await pending.status()
    labels = [
        "0001-active-memory-index",
        "0002-thread-list-index",
        "0003-message-parents",
        "0004-thread-previews",
    ]
    assert status.as_health() == {"pending": labels, "checked": False}
    assert not await pending.completed(1)
    assert log.reads == 1  # not again before retry_s
    log.fail_with = None
    clock.now += 31
    assert (await pending.status()).checked and log.reads == 2


async def test_a_slow_table_costs_at_most_the_timeout() -> None:
    class SlowLog(InMemoryMigrationLog):
        async def completed(self) -> dict[int, CompletedMigration]:
            await asyncio.sleep(10)
            return {}

    pending = PendingMigrations(SlowLog(), timeout_s=0.05)
    started = asyncio.get_running_loop().time()
    status = await pending.status()
    assert asyncio.get_running_loop().time() - started < 1
    assert not status.checked


# ---------------------------------------------------------------------------------------------- /healthz
def app_services(log: InMemoryMigrationLog | None) -> Services:
    return Services(
        Settings(auth_mode="hs256", jwt_secret="s" * 32),
        overrides=ServiceOverrides(store=InMemoryStore(), stream=InMemoryEventStream(), migration_log=log),
    )


def test_healthz_names_the_pending_migrations_and_stays_ok() -> None:
    # GIVEN a deployment whose table has not completed migrations 1 and 2
    log = InMemoryMigrationLog()
    with TestClient(create_app(app_services(log))) as client:
        # WHEN the readiness check asks
        response = client.get("/healthz")
        # THEN it is 200 "ok", and says which migration the code still expects
        assert response.status_code == 200
        assert response.json() == {
            "status": "ok",
            "migrations": {
                "pending": [
                    "0001-active-memory-index",
                    "0002-thread-list-index",
                    "0003-message-parents",
                    "0004-thread-previews",
                ],
                "checked": True,
            },
        }
        # AND when the log cannot be read, still 200 "ok"
        log.fail_with = TimeoutError()
        assert client.get("/healthz").json()["status"] == "ok"


def test_healthz_has_no_migrations_field_without_the_deployments_table() -> None:
    with TestClient(create_app(app_services(None))) as client:
        assert client.get("/healthz").json() == {"status": "ok"}


# ---------------------------------------------------------------------------------------------- the budget
def test_the_budget_spends_write_units_at_its_rate_with_one_second_of_burst() -> None:
    clock = Clock()
    budget = WriteBudget(100, clock=clock, sleep=clock.sleep)
    for _ in range(300):
        budget.spend(1)
    # 100 units of burst, then 200 more at 100 per second
    assert clock.now - 100.0 == pytest.approx(2.0)
    assert budget.spent == 300 and budget.waited_s == pytest.approx(2.0, abs=0.05)


def test_item_sizes_follow_dynamodbs_rules() -> None:
    assert item_size({"PK": {"S": "abc"}}) == 5
    assert item_size({"n": {"N": "123"}}) == 1 + 3  # 3 significant digits: 2 bytes + 1
    assert item_size({"m": {"M": {"a": {"BOOL": True}}}}) == 1 + 3 + (1 + 1 + 1)
    small, big = {"d": {"S": "x" * 1000}}, {"d": {"S": "x" * 3000}}
    assert write_units(small) == 1 and write_units(small, big) == 3


def test_migration_4_gives_a_thread_the_preview_of_its_last_message_when_a_user_sees_it() -> None:
    thread = {"PK": "T#t#TH#th", "SK": "META", "kind": "thread", "last_seq": Decimal(4)}
    assert THREAD_PREVIEWS.neighbour is not None and THREAD_PREVIEWS.apply_beside is not None
    assert THREAD_PREVIEWS.neighbour(thread) == {"PK": "T#t#TH#th", "SK": "M#000000000004"}
    answer = {"role": "assistant", "content": "word " * 40, "created_at": "2026-01-01T00:00:00+00:00", "seq": 4}
    migrated = THREAD_PREVIEWS.migrate(thread, lambda key: answer)
    assert migrated is not None and migrated["last_message"]["role"] == "assistant"
    assert migrated["last_message"]["count"] == 4 and len(migrated["last_message"]["preview"]) <= 120
    # a tool result, a hidden run's message, a missing message, a thread with a preview or no message: nothing
    hidden = {**answer, "meta": {"hidden_from_user": True}}
    for last in ({**answer, "role": "tool"}, hidden, None):
        assert THREAD_PREVIEWS.migrate(thread, lambda key, last=last: last) is None
    assert THREAD_PREVIEWS.neighbour({**thread, "last_message": {}}) is None
    assert THREAD_PREVIEWS.neighbour({**thread, "last_seq": Decimal(0)}) is None

"""The migration runner on DynamoDB (moto): migration 1 over 10,000 memories, stopped and resumed, dry, under
concurrent app writes, and the worker's memory read through the wired store before, during and after it.

Every write the runner sends is counted by a botocore hook on its client (``WriteCounter``), so "no item changed
twice" is counted, not inferred. moto in-process is not thread-safe: the runner's segment threads share one
client that sends one request at a time (``OneRequestAtATime``), as the ``aws`` fixture's clients all do.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.memory_store import DynamoDBMemoryStore, _to_item, memory_pk
from shared.adapters.aws.migration_runner import MigrationRunner, RunnerOptions
from shared.adapters.aws.migration_state import MigrationStateTable, run_key
from shared.memory.injection import ActiveMemories
from shared.memory.models import Deactivation, MemoryStatus
from shared.memory.ports import MemoryStore
from shared.migrations.memory_index import ACTIVE_MEMORY_INDEX
from shared.models import Identity
from shared.wiring import Services
from tests.support.moto_lock import OneRequestAtATime
from tests.support.old_shapes import Seeded, WriteCounter, before_index, memory, seed
from tests.support.settings import TABLE, make_settings

MEMORY_ONLY = (ACTIVE_MEMORY_INDEX,)
"""Migration 1 alone: these cases are about it (migration 2: tests/integration/test_thread_list_index.py)."""
FAST = RunnerOptions(segments=4, page_size=1_000, rate_wcu=1_000_000)
"""No throttle, and big pages: moto reads the whole table for every page, so fewer pages is what saves time."""


def stop_after(pages: int) -> Callable[[], bool]:
    """A time budget that runs out after ``pages`` pages have been started (all segments together)."""
    lock, asked = threading.Lock(), [0]

    def stop() -> bool:
        with lock:
            asked[0] += 1
            return asked[0] > pages

    return stop


def all_items(client: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": TABLE, "Limit": 2_000}
    while True:
        page = client.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return sorted(items, key=lambda i: (i["PK"]["S"], i["SK"]["S"]))
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def memory_items(client: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(i["PK"]["S"], i["SK"]["S"]): i for i in all_items(client) if i["kind"]["S"] == "memory"}


@pytest.fixture
def client(aws: Any) -> Any:
    return OneRequestAtATime(aws)


@pytest.fixture
def seeded(aws: Any) -> Seeded:
    table = Seeded(10_000)
    seed(aws, TABLE, table.items)
    return table


def test_migration_1_writes_exactly_what_the_adapter_writes_today() -> None:
    # GIVEN an active and an inactive memory in the shape written before the bounded read
    for active in (True, False):
        old = codec.from_item(before_index(memory(7, user="alice", active=active)))
        # WHEN migrated (the runner stamps the version on what apply returns)
        new = ACTIVE_MEMORY_INDEX.apply(old)
        migrated = old if new is None else {**new, "schema_v": ACTIVE_MEMORY_INDEX.to_version}
        # THEN the item is the one today's adapter writes for that memory, but for the version of an unchanged one
        today = codec.from_item(_to_item(memory(7, user="alice", active=active)))
        assert migrated == (today if active else {k: v for k, v in today.items() if k != "schema_v"})


@pytest.mark.slow
def test_a_dry_run_counts_what_it_would_change_and_writes_nothing(aws: Any, client: Any, seeded: Seeded) -> None:
    # GIVEN 10,000 memories, 4,200 of them active in the old shape, and 500 threads
    before = all_items(aws)
    writes = WriteCounter(client)
    # WHEN the migrations are run dry
    report = MigrationRunner(TABLE, client, FAST).run_pending(MEMORY_ONLY, dry_run=True)
    # THEN it counted every memory once, the old active ones as changes, and wrote nothing at all
    (only,) = report.migrations
    assert only.outcome == "dry_run"
    assert only.counts.matched == 10_000 * 9 // 10  # those written by this code are already at version 2
    assert only.counts.changed == len(seeded.needs_change) == 4_200
    assert only.counts.unchanged == only.counts.matched - 4_200
    assert only.counts.scanned == len(seeded.items) and only.write_units == 0
    assert sum(writes.written.values()) == sum(writes.refused.values()) == 0
    assert all_items(aws) == before  # no item, no checkpoint, no lease, no registry entry
    assert "Item" not in aws.get_item(TableName=TABLE, Key=run_key(1))


@pytest.mark.slow
def test_a_stopped_run_resumes_where_it_stopped_and_changes_no_item_twice(
    aws: Any, client: Any, seeded: Seeded
) -> None:
    writes = WriteCounter(client)
    # GIVEN a run that runs out of time after 5 of its 13 pages
    started = time.monotonic()
    first = MigrationRunner(TABLE, client, FAST).run_pending(MEMORY_ONLY, stop=stop_after(5))
    # THEN it stopped mid-way, recorded nothing as completed, and gave its lease back
    (stopped,) = first.migrations
    assert stopped.outcome == "stopped" and first.out_of_time and not first.finished
    assert 0 < stopped.counts.changed < 4_200 and stopped.pages == 5
    state = MigrationStateTable(TABLE, client)
    assert state.completed() == {}
    assert "lease_owner" not in aws.get_item(TableName=TABLE, Key=run_key(1))["Item"]
    # WHEN another runner (another process, another owner) runs the pending migrations
    second = MigrationRunner(TABLE, client, FAST).run_pending(MEMORY_ONLY)
    elapsed = time.monotonic() - started
    # THEN it went on from the checkpoints and completed
    (resumed,) = second.migrations
    assert resumed.outcome == "completed" and second.finished
    assert resumed.counts.changed == 4_200 and resumed.counts.conflicts == 0
    # AND every old active memory was written exactly once, nothing else at all
    assert writes.twice == [] and set(writes.written) == seeded.needs_change
    assert sum(writes.refused.values()) == 0
    # AND every memory is now what today's adapter writes, the others untouched
    after = memory_items(aws)
    for key in seeded.needs_change:
        assert after[key] == _to_item(seeded.memories[key])
    assert state.completed()[1].changed == 4_200
    print(f"\n10,000 memories: 4,200 written once each in {elapsed:.1f} s over moto, {resumed.write_units} units")


async def worker_reads(memories: MemoryStore, seeded: Seeded) -> dict[str, list[str]]:
    """Each user's memories as the worker reads them for its note (``ActiveMemories``: the 50 most recently
    updated active ones, ranked; with no query words, newest first), the 20 it would inject."""
    reader = ActiveMemories(memories)
    return {
        user: [m.id for m in await reader.relevant_active(Identity(tenant_id="tenant-m", user_id=user), "", limit=20)]
        for user in seeded.users()
    }


@pytest.mark.slow
async def test_the_worker_reads_the_right_memories_before_during_and_after_the_migration(
    aws: Any, client: Any, seeded: Seeded
) -> None:
    # GIVEN the services as a deployed function wires them (the memory store asks the migration log which reader)
    services = Services(make_settings(migration_status_ttl_s=0))
    expected = {user: seeded.newest_active(user, 20) for user in seeded.users()}
    # WHEN the worker reads before the migration, THEN each user's newest active memories, old shape included
    assert await worker_reads(services.memories, seeded) == expected
    # AND the index alone misses the old ones: the old-shape reader is what makes it right in the window
    assert await worker_reads(DynamoDBMemoryStore(TABLE, lambda: client), seeded) != expected
    # WHEN the migration stopped part-way, and meanwhile the app wrote a new memory and deactivated an old one
    run = MigrationRunner(TABLE, client, FAST)
    (partial,) = (await asyncio.to_thread(run.run_pending, MEMORY_ONLY, stop=stop_after(6))).migrations
    assert partial.outcome == "stopped" and 0 < partial.counts.changed < 4_200
    newest = memory(20_000, user="user-00", active=True)
    await services.memories.put(newest)
    retracted = expected["user-01"][0]
    await services.memories.deactivate(
        "tenant-m",
        "user-01",
        retracted,
        Deactivation(
            status=MemoryStatus.RETRACTED,
            reason="wrong",
            run_id="r",
            evidence_quote="q",
            source_message_ids=["m"],
        ),
    )
    expected["user-00"] = [newest.id, *expected["user-00"][:19]]
    expected["user-01"] = seeded.newest_active("user-01", 21)[1:]
    # THEN the reads are right during it
    assert await worker_reads(services.memories, seeded) == expected
    # WHEN it completes, THEN they are right after it, each one Query of the index
    (done,) = (await asyncio.to_thread(run.run_pending, MEMORY_ONLY)).migrations
    assert done.outcome == "completed"
    queries: list[str | None] = []
    services.memories.client.meta.events.register(  # type: ignore[attr-defined]
        "before-parameter-build.dynamodb.Query", lambda params, **_: queries.append(params.get("IndexName"))
    )
    assert await worker_reads(services.memories, seeded) == expected
    assert queries == ["GSI1"] * len(seeded.users())


def test_an_app_write_between_the_runners_read_and_write_survives(aws: Any, client: Any) -> None:
    # GIVEN three old-shape active memories of one user, and an app (this code and the release before it) that
    # writes two of them just after the runner read them, before its conditional write reaches the table
    memories = [memory(i, user="alice", active=True) for i in range(3)]
    seed(aws, TABLE, [before_index(m) for m in memories])
    edited = memories[0].model_copy(update={"content": "edited by this code"})
    older_release = memories[1].model_copy(update={"content": "edited by the release before"})
    # What DynamoDBMemoryStore.put sends, and what the release before it sent; on the runner's thread, inside its
    # call (moto in-process serves one request at a time).
    planted = {
        memories[0].id: lambda: aws.put_item(TableName=TABLE, Item=_to_item(edited)),
        memories[1].id: lambda: aws.put_item(TableName=TABLE, Item=before_index(older_release)),
    }

    def app_writes_first(params: dict[str, Any], **_: Any) -> None:
        write = planted.pop(params["Item"]["SK"]["S"], None)
        if write is not None:
            write()

    client.meta.events.register("before-parameter-build.dynamodb.PutItem", app_writes_first)
    writes = WriteCounter(client)
    # WHEN the migration runs
    report = MigrationRunner(TABLE, client, FAST).run_pending(MEMORY_ONLY)
    # THEN both of its writes were refused by their condition, the app's writes survived, and each item is migrated
    (only,) = report.migrations
    assert only.outcome == "completed" and only.counts.conflicts == 2
    assert sum(writes.refused.values()) == 2
    after = memory_items(aws)
    pk = memory_pk("tenant-m", "alice")
    assert after[(pk, edited.id)] == _to_item(edited)  # written by this code: already version 2, left alone
    assert after[(pk, older_release.id)] == _to_item(older_release)  # re-read and migrated from the app's write
    assert after[(pk, memories[2].id)] == _to_item(memories[2])
    assert only.counts.changed == 2 and only.counts.already == 1


def test_a_memory_deleted_under_the_runner_is_not_written_back(aws: Any, client: Any) -> None:
    m = memory(1, user="alice", active=True)
    seed(aws, TABLE, [before_index(m)])
    deleted: list[bool] = []

    def delete_first(params: dict[str, Any], **_: Any) -> None:
        if not deleted:
            deleted.append(True)
            aws.delete_item(TableName=TABLE, Key={"PK": params["Item"]["PK"], "SK": params["Item"]["SK"]})

    client.meta.events.register("before-parameter-build.dynamodb.PutItem", delete_first)
    (only,) = MigrationRunner(TABLE, client, FAST).run_pending(MEMORY_ONLY).migrations
    assert only.outcome == "completed" and only.counts.gone == 1 and memory_items(aws) == {}


def test_only_one_runner_at_a_time(aws: Any, client: Any) -> None:
    seed(aws, TABLE, [before_index(memory(1, user="alice", active=True))])
    holder = MigrationRunner(TABLE, client, FAST, owner="first")
    holder.state.begin(ACTIVE_MEMORY_INDEX, total_segments=4, owner="first", lease_s=60)
    (refused,) = MigrationRunner(TABLE, client, FAST, owner="second").run_pending(MEMORY_ONLY).migrations
    assert refused.outcome == "busy"
    holder.state.release(1, owner="first")
    (done,) = MigrationRunner(TABLE, client, FAST, owner="second").run_pending(MEMORY_ONLY).migrations
    assert done.outcome == "completed"


def test_a_pass_with_a_failed_item_stays_pending_and_the_next_pass_migrates_only_the_rest(
    aws: Any, client: Any
) -> None:
    # GIVEN 20 old-shape active memories, one of them unreadable
    good = [memory(i, user="alice", active=True) for i in range(20)]
    broken = before_index(memory(99, user="alice", active=True)) | {"data": {"S": "{not json"}}
    seed(aws, TABLE, [*(before_index(m) for m in good), broken])
    writes = WriteCounter(client)
    # WHEN the migration runs, THEN it migrates the rest and is not recorded as completed
    (first,) = MigrationRunner(TABLE, client, FAST).run_pending(MEMORY_ONLY).migrations
    assert (first.outcome, first.counts.changed, first.counts.failed) == ("incomplete", 20, 1)
    assert MigrationStateTable(TABLE, client).completed() == {}
    # WHEN the item is repaired and the migration runs again, THEN a second pass writes only that one
    seed(aws, TABLE, [before_index(memory(99, user="alice", active=True))])
    (second,) = MigrationRunner(TABLE, client, FAST).run_pending(MEMORY_ONLY).migrations
    assert (second.outcome, second.pass_no, second.counts.changed) == ("completed", 2, 1)
    assert writes.twice == [] and len(writes.written) == 21


def test_the_run_is_throttled_to_its_write_rate(aws: Any, client: Any) -> None:
    # GIVEN 100 memories to migrate and a budget of 40 write units per second (one second of burst)
    seed(aws, TABLE, [before_index(memory(i, user="alice", active=True)) for i in range(100)])
    options = RunnerOptions(segments=2, page_size=50, rate_wcu=40)
    # WHEN it runs
    (report,) = MigrationRunner(TABLE, client, options).run_pending(MEMORY_ONLY).migrations
    # THEN it spent one unit per (small) item and one per checkpoint, no faster than 40 a second after the burst
    assert report.outcome == "completed" and report.write_units == 100 + report.pages
    assert report.elapsed_s >= (report.write_units - 40) / 40 * 0.95
    assert report.waited_s > 0

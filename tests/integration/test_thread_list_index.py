"""Migration 2 on DynamoDB (moto): thread items of the release before (in ``GSI1``, which projects whole items)
move to the thread-list index (``GSI3``), on a live table, resumably; the listing is whole before, during and after,
and a run's claim moves the thread it touches.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, cast

import pytest

from shared.adapters.aws import dynamo_codec as codec
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.aws.migration_runner import MigrationRunner, RunnerOptions
from shared.migrations.thread_list_index import THREAD_LIST_INDEX
from shared.models import Identity, utc_now
from tests.support.moto_lock import OneRequestAtATime
from tests.support.old_shapes import WriteCounter, seed
from tests.support.settings import TABLE

ALICE = Identity(tenant_id="tenant-a", user_id="alice")
OLD_THREADS = 30
SMALL_PAGES = RunnerOptions(segments=2, page_size=10, rate_wcu=1_000_000)


def old_thread(i: int, user: str = "alice") -> dict[str, Any]:
    """A thread item as the release before wrote it (``open_thread`` then appends): in GSI1, no version."""
    updated = f"2026-01-01T00:00:{i:02d}+00:00"
    return codec.to_item(
        {
            "PK": codec.thread_pk("tenant-a", f"old-{i:02d}"),
            "SK": codec.META,
            "kind": "thread",
            "tenant_id": "tenant-a",
            "thread_id": f"old-{i:02d}",
            "owner_user_id": user,
            "created_at": "2026-01-01T00:00:00+00:00",
            "updated_at": updated,
            "last_seq": 4,
            "GSI1PK": codec.user_threads_gsi("tenant-a", user),
            "GSI1SK": f"{updated}#old-{i:02d}",
        }
    )


def store_in_window(client: Any, complete: list[bool]) -> DynamoDBStore:
    """The wired store as in the migration window: it reads both indexes until ``complete[0]``."""

    async def list_complete() -> bool:
        return complete[0]

    hook = cast(Callable[[], Awaitable[bool]], list_complete)
    return DynamoDBStore(TABLE, lambda: cast(Any, client), thread_list_complete=hook)


async def listing(store: DynamoDBStore, page: int = 7) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    for _ in range(50):
        threads, cursor = await store.threads.list_threads(ALICE, limit=page, cursor=cursor)
        ids += [t.thread_id for t in threads]
        if cursor is None:
            return ids
    raise AssertionError("the listing never ended")


def in_index(aws: Any, index: str, pk_name: str) -> list[str]:
    resp = aws.query(
        TableName=TABLE,
        IndexName=index,
        KeyConditionExpression=f"{pk_name} = :p",
        ExpressionAttributeValues={":p": {"S": codec.user_threads_gsi("tenant-a", "alice")}},
    )
    return sorted(item["thread_id"]["S"] for item in resp["Items"])


def stop_after(pages: int) -> Callable[[], bool]:
    lock, asked = threading.Lock(), [0]

    def stop() -> bool:
        with lock:
            asked[0] += 1
            return asked[0] > pages

    return stop


@pytest.fixture
def client(aws: Any) -> Any:
    return OneRequestAtATime(aws)


async def test_old_threads_move_to_the_thread_list_index_resumably_and_the_listing_stays_whole(
    aws: Any, client: Any
) -> None:
    # GIVEN 30 threads of the release before, one of bob's, and 2 threads this release made
    seed(aws, TABLE, [old_thread(i) for i in range(OLD_THREADS)] + [old_thread(99, user="bob")])
    complete = [False]
    store = store_in_window(client, complete)
    for name in ("new-a", "new-b"):
        await store.threads.open_thread(ALICE, name)
    expected = ["new-b", "new-a", *(f"old-{i:02d}" for i in reversed(range(OLD_THREADS)))]
    # THEN in the window the listing merges both indexes: every thread once, newest first, page by page
    assert await listing(store) == expected
    # WHEN a run claims an old thread, the claim moves it to the new index (and to the top, as it is in use)
    claim = await store.threads.open_and_claim(ALICE, "old-05", "r1", stale_before=utc_now() - timedelta(minutes=15))
    assert claim is not None and claim.last_seq == 4
    await store.threads.release_thread("tenant-a", "old-05", "r1")
    assert "old-05" in in_index(aws, "GSI3", "GSI3PK") and "old-05" not in in_index(aws, "GSI1", "GSI1PK")
    expected = ["old-05", *(t for t in expected if t != "old-05")]
    assert await listing(store) == expected
    # WHEN the migration runs out of time after 2 pages, then another runner resumes it
    writes = WriteCounter(client)
    first = MigrationRunner(TABLE, client, SMALL_PAGES).run_pending([THREAD_LIST_INDEX], stop=stop_after(2))
    (stopped,) = first.migrations
    assert stopped.outcome == "stopped" and 0 < stopped.counts.changed < OLD_THREADS
    assert await listing(store) == expected  # still whole half-way
    (done,) = MigrationRunner(TABLE, client, SMALL_PAGES).run_pending([THREAD_LIST_INDEX]).migrations
    # THEN it completed, each of the 30 remaining old threads (bob's too) written exactly once
    assert done.outcome == "completed"
    assert done.counts.changed == OLD_THREADS  # the run's total: 29 of alice's and bob's (old-05 moved already)
    assert writes.twice == [] and sum(writes.refused.values()) == 0
    # AND no thread is left in GSI1, each is in the thread-list index at its update time, at version 2
    assert in_index(aws, "GSI1", "GSI1PK") == []
    assert len(in_index(aws, "GSI3", "GSI3PK")) == OLD_THREADS + 2
    moved = aws.get_item(TableName=TABLE, Key={"PK": {"S": codec.thread_pk("tenant-a", "old-07")}, "SK": {"S": "META"}})
    assert moved["Item"]["GSI3SK"]["S"] == "2026-01-01T00:00:07+00:00#old-07"
    assert moved["Item"]["schema_v"]["N"] == "2" and moved["Item"]["last_seq"]["N"] == "4"
    # AND once recorded as completed the listing reads the new index alone, with the same answer
    complete[0] = True
    assert await listing(store) == expected


async def test_a_cursor_of_the_release_before_still_pages(aws: Any, client: Any) -> None:
    seed(aws, TABLE, [old_thread(i) for i in range(5)])
    store = store_in_window(client, [False])
    # GIVEN a cursor a client got from the release before (GSI1's ExclusiveStartKey), after old-03
    old_cursor = codec.to_item(
        {
            "PK": codec.thread_pk("tenant-a", "old-03"),
            "SK": "META",
            "GSI1PK": codec.user_threads_gsi("tenant-a", "alice"),
            "GSI1SK": "2026-01-01T00:00:03+00:00#old-03",
        }
    )
    cursor = base64.urlsafe_b64encode(json.dumps(old_cursor).encode()).decode()
    # WHEN it is used  THEN the listing goes on after old-03
    threads, _ = await store.threads.list_threads(ALICE, limit=10, cursor=cursor)
    assert [t.thread_id for t in threads] == ["old-02", "old-01", "old-00"]

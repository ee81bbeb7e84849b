"""Read units of a thread listing and of a thread search on DynamoDB (moto), counted with the project's DynamoDB meter
(``bench/dynamo_meter.py``): what docs/storage.md and docs/benchmarks.md quote. A user with 200 threads, each with a
title, metadata and a preview of its last message (list entries of about 350 bytes)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from shared.models import Role, utc_now
from shared.thread_fields import check_changes
from shared.thread_search import LISTING, MAX_EXAMINED, ThreadCriteria
from tests.support.metered_table import USER, message, metered_store

THREADS = 200


async def _seed(store: Any) -> None:
    for i in range(THREADS):
        tid = f"th-{i:03d}"
        await store.threads.open_thread(USER, tid)
        assert await store.threads.claim_thread(USER, tid, f"r{i}", stale_before=utc_now() - timedelta(1))
        await store.threads.append_messages(
            USER, tid, [message(f"q{i}", thread_id=tid), message(f"a{i}", Role.ASSISTANT, tid)]
        )
        await store.threads.release_thread(USER.tenant_id, tid, f"r{i}")
        fields: dict[str, Any] = {"title": f"Conversation number {i}", "metadata": {"team": "blue" if i % 2 else "red"}}
        if i in (3, 150):
            fields["pinned"] = True
        await store.threads.update_thread(USER, tid, check_changes(fields))


async def test_a_listing_page_and_a_search_cost_read_units_bounded_by_the_users_partition(aws: Any) -> None:
    # GIVEN 200 threads of one user on DynamoDB, metered
    store, meter = metered_store(aws)
    meter.enabled = False
    await _seed(store)
    meter.enabled = True
    costs: dict[str, tuple[float, int, int]] = {}
    calls = {
        "listing, first page of 20": LISTING,
        "search by title text": ThreadCriteria(query="number 42"),
        "search by metadata": ThreadCriteria(metadata={"team": "blue"}),
    }
    for name, criteria in calls.items():
        before = meter.snapshot()
        page, _ = await store.threads.search_threads(USER, criteria, limit=20, cursor=None)
        spent = meter.snapshot().minus(before)
        costs[name] = (spent.rru, spent.requests["Query"], len(page))
        assert set(spent.units_by_pattern) == {"agent-test/GSI3:T#*#U#*#THREADS"}, (name, spent.units_by_pattern)
    print("read units per call (200 threads):", costs)
    # THEN the listing's first page shows the two pinned threads first
    listing, _ = await store.threads.search_threads(USER, LISTING, limit=20, cursor=None)
    assert [t.thread_id for t in listing[:2]] == ["th-150", "th-003"]
    # AND every call was Queries of the user's partition of the list index only (no scan, no table read), each
    # bounded: the listing's pinned pass and a text search read the partition (200 entries of ~500 bytes: 13 units),
    # measured 15 (listing), 13.5 (text), 6.5 (metadata, found in the first batch) in docs/storage.md
    assert meter.snapshot().requests["Scan"] == 0
    for name, (rru, queries, found) in costs.items():
        assert found >= 1, name
        assert queries <= 2 * MAX_EXAMINED // 100 + 2, (name, queries)
        assert rru <= 16, (name, rru)

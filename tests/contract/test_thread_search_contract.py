"""Contract of ``ThreadStore.search_threads`` (issue 45): the listing (unarchived, pinned first, then the most
recent) and search by text and metadata, cursor-paged, against ``InMemoryThreads`` and ``DynamoDBThreads`` (moto)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.in_memory.store import InMemoryStore
from shared.errors import InvalidRequest
from shared.models import Identity, Role, utc_now
from shared.thread_fields import check_changes
from shared.thread_search import LISTING, ThreadCriteria
from tests.support.table_stores import (
    ALICE,
    ALICE_ELSEWHERE,
    BOB,
    msg,
    table_store_fixture,  # noqa: F401  (the `store` fixture)
)

Store = InMemoryStore | DynamoDBStore


async def _thread(store: Store, thread_id: str, answer: str, **fields: object) -> None:
    """A thread with one turn answered ``answer`` (released, so listed after the threads made before it)."""
    await store.threads.open_thread(ALICE, thread_id)
    assert await store.threads.claim_thread(ALICE, thread_id, f"r-{thread_id}", stale_before=utc_now() - timedelta(1))
    await store.threads.append_messages(
        ALICE, thread_id, [msg(f"{thread_id}-q", thread_id), msg(f"{thread_id}-a", thread_id, answer, Role.ASSISTANT)]
    )
    await store.threads.release_thread("tenant-a", thread_id, f"r-{thread_id}")
    if fields:
        await store.threads.update_thread(ALICE, thread_id, check_changes(dict(fields)))
    await asyncio.sleep(0.002)


async def _all(store: Store, criteria: ThreadCriteria, limit: int = 10, who: Identity = ALICE) -> tuple[list[str], int]:
    """Every page of a search: the thread ids in order and the number of calls."""
    ids: list[str] = []
    cursor: str | None = None
    for calls in range(1, 50):
        page, cursor = await store.threads.search_threads(who, criteria, limit=limit, cursor=cursor)
        ids.extend(t.thread_id for t in page)
        if cursor is None:
            return ids, calls
    raise AssertionError("the search never ran out of pages")


async def test_the_listing_hides_archived_threads_and_shows_pinned_ones_first(store: Store) -> None:
    # GIVEN t1 (pinned), t2, t3 (archived), t4 made in that order: t4 is the newest
    await _thread(store, "t1", "one", pinned=True)
    await _thread(store, "t2", "two")
    await _thread(store, "t3", "three", archived=True)
    await _thread(store, "t4", "four")
    # THEN the listing is the pinned t1, then t4 and t2, newest first, with or without paging
    assert (await _all(store, LISTING))[0] == ["t1", "t4", "t2"]
    assert (await _all(store, LISTING, limit=1))[0] == ["t1", "t4", "t2"]
    # AND the archived thread is found by asking for archived threads
    assert (await _all(store, ThreadCriteria(archived=True)))[0] == ["t3"]


async def test_search_by_title_is_case_insensitive_and_by_words_of_the_preview(store: Store) -> None:
    await _thread(store, "t1", "The weather in Lisbon is mild", title="Travel PLANS")
    await _thread(store, "t2", "Pasta carbonara needs eggs")
    await _thread(store, "t3", "nothing to see")
    assert (await _all(store, ThreadCriteria(query="travel plans")))[0] == ["t1"]
    assert (await _all(store, ThreadCriteria(query="lisb weath")))[0] == ["t1"]
    assert (await _all(store, ThreadCriteria(query="CARBONARA")))[0] == ["t2"]
    assert (await _all(store, ThreadCriteria(query="eggs lisbon")))[0] == []


async def test_search_by_metadata_is_an_exact_match_on_every_given_key(store: Store) -> None:
    await _thread(store, "t1", "a", metadata={"team": "blue", "n": 1})
    await _thread(store, "t2", "b", metadata={"team": "blue", "n": 2})
    await _thread(store, "t3", "c", metadata={"team": "red", "flag": True})
    assert (await _all(store, ThreadCriteria(metadata={"team": "blue"})))[0] == ["t2", "t1"]
    assert (await _all(store, ThreadCriteria(metadata={"team": "blue", "n": 1})))[0] == ["t1"]
    assert (await _all(store, ThreadCriteria(metadata={"flag": 1})))[0] == []  # a boolean is not a number
    assert (await _all(store, ThreadCriteria(metadata={"team": "Blue"})))[0] == []


async def test_search_never_finds_another_users_or_tenants_threads(store: Store) -> None:
    await _thread(store, "t1", "secret plans", title="secret")
    for other in (BOB, ALICE_ELSEWHERE):
        assert (await _all(store, ThreadCriteria(query="secret"), who=other))[0] == []
        assert (await _all(store, LISTING, who=other))[0] == []


async def test_a_cursor_is_bound_to_its_caller_and_to_its_kind_of_walk(store: Store) -> None:
    await _thread(store, "t1", "a")
    await _thread(store, "t2", "b")
    _, cursor = await store.threads.search_threads(ALICE, ThreadCriteria(), limit=1, cursor=None)
    assert cursor is not None
    with pytest.raises(InvalidRequest):
        await store.threads.search_threads(BOB, ThreadCriteria(), limit=1, cursor=cursor)
    with pytest.raises(InvalidRequest):
        await store.threads.search_threads(ALICE, LISTING, limit=1, cursor=cursor)
    with pytest.raises(InvalidRequest):
        await store.threads.search_threads(ALICE, LISTING, limit=1, cursor="not-a-cursor")

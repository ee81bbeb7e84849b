"""Contract of a thread's product fields (issue 45) on ``ThreadStore``: the last visible message's preview and the
message count kept on the write path, and ``update_thread`` (title, metadata merge, archived, pinned), against
``InMemoryThreads`` and ``DynamoDBThreads`` (moto) alike."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.in_memory.store import InMemoryStore
from shared.errors import InvalidRequest, NotFound
from shared.models import ExecutionMeta, Role, utc_now
from shared.thread_fields import METADATA_KEYS, PREVIEW_CHARS, check_changes
from tests.support.table_stores import (
    ALICE,
    ALICE_ELSEWHERE,
    BOB,
    msg,
    table_store_fixture,  # noqa: F401  (the `store` fixture)
)

Store = InMemoryStore | DynamoDBStore


async def _turn(store: Store, run_id: str, *messages: object) -> None:
    """A run's turn: claim, append, release (the release is the thread list's one move a turn)."""
    assert await store.threads.claim_thread(ALICE, "t1", run_id, stale_before=utc_now() - timedelta(minutes=15))
    await store.threads.append_messages(ALICE, "t1", list(messages))  # type: ignore[arg-type]
    await store.threads.release_thread("tenant-a", "t1", run_id)


async def test_a_turn_leaves_the_last_visible_message_and_the_count_on_the_thread_and_its_list_entry(
    store: Store,
) -> None:
    # GIVEN a thread with one exchange, the answer long, then a tool result after it
    await store.threads.open_thread(ALICE, "t1")
    answer = "word " * 60
    await _turn(
        store,
        "r1",
        msg("m1", content="hello there"),
        msg("m2", content=answer, role=Role.ASSISTANT),
        msg("m3", content="tool output", role=Role.TOOL).model_copy(update={"tool_call_id": "c1"}),
    )
    # THEN the thread and its list entry show the answer as the last visible message, cut to the preview size
    thread = await store.threads.get_thread(ALICE, "t1")
    listed, _ = await store.threads.list_threads(ALICE, limit=10, cursor=None)
    for shown in (thread, listed[0]):
        assert shown.last_message is not None
        assert shown.last_message.role == "assistant"
        assert shown.last_message.preview.startswith("word word")
        assert len(shown.last_message.preview) <= PREVIEW_CHARS
        assert shown.message_count == 2


async def test_a_hidden_message_is_never_the_preview(store: Store) -> None:
    # GIVEN a visible question, then a message of a hidden run
    await store.threads.open_thread(ALICE, "t1")
    hidden = msg("m2", content="secret", role=Role.ASSISTANT).model_copy(
        update={"meta": ExecutionMeta(hidden_from_user=True)}
    )
    await _turn(store, "r1", msg("m1", content="visible question"), hidden)
    # THEN the preview is the visible question
    thread = await store.threads.get_thread(ALICE, "t1")
    assert thread.last_message is not None and thread.last_message.preview == "visible question"


async def test_a_thread_with_no_message_has_no_preview(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    listed, _ = await store.threads.list_threads(ALICE, limit=10, cursor=None)
    assert listed[0].last_message is None and listed[0].message_count == 0
    assert listed[0].title is None and listed[0].metadata == {} and not listed[0].archived and not listed[0].pinned


async def test_update_sets_title_flags_and_merges_metadata_with_null_removing_a_key(store: Store) -> None:
    # GIVEN a thread with two metadata keys
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.update_thread(ALICE, "t1", check_changes({"metadata": {"team": "blue", "n": 3}}))
    # WHEN a second change sets the title and the flags, removes one key and adds another
    changes = check_changes(
        {"title": "Trip plans", "metadata": {"n": None, "ratio": 0.5}, "archived": True, "pinned": True}
    )
    changed = await store.threads.update_thread(ALICE, "t1", changes)
    # THEN both the returned thread, a read and the list entry show the result, the title as the client's
    for thread in (changed, await store.threads.get_thread(ALICE, "t1")):
        assert thread.title == "Trip plans" and thread.title_source == "client"
        assert thread.metadata == {"team": "blue", "ratio": 0.5}
        assert thread.archived and thread.pinned
    listed, _ = await store.threads.list_threads(ALICE, limit=10, cursor=None)
    assert listed[0].title == "Trip plans" and listed[0].metadata == {"team": "blue", "ratio": 0.5}
    assert listed[0].archived and listed[0].pinned
    # AND a null title removes it, leaving the rest
    cleared = await store.threads.update_thread(ALICE, "t1", check_changes({"title": None}))
    assert cleared.title is None and cleared.metadata == {"team": "blue", "ratio": 0.5}
    assert (await store.threads.get_thread(ALICE, "t1")).title is None


async def test_update_keeps_the_preview_and_a_later_turn_keeps_the_title(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    await _turn(store, "r1", msg("m1", content="first"))
    await store.threads.update_thread(ALICE, "t1", check_changes({"title": "Named"}))
    await _turn(store, "r2", msg("m2", content="second"))
    thread = await store.threads.get_thread(ALICE, "t1")
    assert thread.title == "Named"
    assert thread.last_message is not None and thread.last_message.preview == "second"
    assert thread.message_count == 2


async def test_another_users_or_tenants_thread_cannot_be_updated(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    for other in (BOB, ALICE_ELSEWHERE):
        with pytest.raises(NotFound):
            await store.threads.update_thread(other, "t1", check_changes({"title": "mine now"}))
    assert (await store.threads.get_thread(ALICE, "t1")).title is None


async def test_metadata_merged_over_its_key_bound_is_refused_and_nothing_changes(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    full = {f"k{i}": i for i in range(METADATA_KEYS)}
    await store.threads.update_thread(ALICE, "t1", check_changes({"metadata": full}))
    with pytest.raises(InvalidRequest):
        await store.threads.update_thread(ALICE, "t1", check_changes({"metadata": {"one-more": "x"}}))
    assert (await store.threads.get_thread(ALICE, "t1")).metadata == full


async def test_a_generated_title_is_written_once_on_a_thread_without_one_and_keeps_its_metadata(store: Store) -> None:
    # GIVEN a thread never changed, and one whose metadata (only) a client set
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.open_thread(ALICE, "t2")
    await store.threads.update_thread(ALICE, "t2", check_changes({"metadata": {"team": "blue"}}))
    for thread_id in ("t1", "t2"):
        # WHEN a generated title is written, then a second one
        assert await store.threads.set_generated_title(ALICE, thread_id, "Reise nach Lissabon")
        assert not await store.threads.set_generated_title(ALICE, thread_id, "Another title")
        # THEN the first one stays, marked generated, on the thread and its list entry; the metadata is kept
        thread = await store.threads.get_thread(ALICE, thread_id)
        assert (thread.title, thread.title_source) == ("Reise nach Lissabon", "generated")
    listed, _ = await store.threads.list_threads(ALICE, limit=10, cursor=None)
    assert {t.thread_id: t.title for t in listed} == {"t1": "Reise nach Lissabon", "t2": "Reise nach Lissabon"}
    assert (await store.threads.get_thread(ALICE, "t2")).metadata == {"team": "blue"}


async def test_a_generated_title_never_replaces_a_title_the_client_set_or_removed(store: Store) -> None:
    # GIVEN a thread the client titled, and one whose title the client removed (after a generated one)
    await store.threads.open_thread(ALICE, "named")
    await store.threads.update_thread(ALICE, "named", check_changes({"title": "Client title"}))
    await store.threads.open_thread(ALICE, "cleared")
    assert await store.threads.set_generated_title(ALICE, "cleared", "Generated")
    await store.threads.update_thread(ALICE, "cleared", check_changes({"title": None}))
    # WHEN a generated title is written on each
    # THEN neither write happens: the client's title stays, the removed one stays removed
    assert not await store.threads.set_generated_title(ALICE, "named", "Generated")
    assert not await store.threads.set_generated_title(ALICE, "cleared", "Generated again")
    named = await store.threads.get_thread(ALICE, "named")
    assert (named.title, named.title_source) == ("Client title", "client")
    cleared = await store.threads.get_thread(ALICE, "cleared")
    assert (cleared.title, cleared.title_source) == (None, "client")


async def test_a_client_title_replaces_a_generated_one(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    assert await store.threads.set_generated_title(ALICE, "t1", "Generated")
    await store.threads.update_thread(ALICE, "t1", check_changes({"title": "Mine"}))
    thread = await store.threads.get_thread(ALICE, "t1")
    assert (thread.title, thread.title_source) == ("Mine", "client")


async def test_a_generated_title_on_another_users_or_tenants_thread_is_not_found(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    for other in (BOB, ALICE_ELSEWHERE):
        with pytest.raises(NotFound):
            await store.threads.set_generated_title(other, "t1", "Stolen")
    with pytest.raises(NotFound):
        await store.threads.set_generated_title(ALICE, "no-such-thread", "Nothing")
    assert (await store.threads.get_thread(ALICE, "t1")).title is None


def after_the_first_request(store: Store, action: Callable[[], Awaitable[object]]) -> None:
    """Run ``action`` once, right after the store's next request (the title's read) and before the one after it."""
    done = False
    target: Any = store.threads if isinstance(store, DynamoDBStore) else store.threads._meter
    name = "_call" if isinstance(store, DynamoDBStore) else "request"
    original = getattr(target, name)

    async def then_act(*args: Any) -> Any:
        nonlocal done
        result = await original(*args)
        if not done:
            done = True
            await action()
        return result

    setattr(target, name, then_act)


async def test_a_client_title_set_between_the_read_and_the_write_wins(store: Store) -> None:
    # GIVEN a thread without a title, renamed by its client just after the generated title's read
    await store.threads.open_thread(ALICE, "t1")
    after_the_first_request(store, lambda: store.threads.update_thread(ALICE, "t1", check_changes({"title": "Client"})))
    # WHEN the generated title is written
    written = await store.threads.set_generated_title(ALICE, "t1", "Generated")
    # THEN it is not: the client's title stays
    assert not written
    thread = await store.threads.get_thread(ALICE, "t1")
    assert (thread.title, thread.title_source) == ("Client", "client")


async def test_metadata_set_between_the_read_and_the_write_is_kept_with_the_generated_title(store: Store) -> None:
    # GIVEN a thread never changed, whose client tags it (metadata only) just after the generated title's read
    await store.threads.open_thread(ALICE, "t1")
    after_the_first_request(
        store, lambda: store.threads.update_thread(ALICE, "t1", check_changes({"metadata": {"team": "blue"}}))
    )
    # WHEN the generated title is written
    # THEN it is (tried again on the map that appeared, on DynamoDB), and the client's metadata is kept
    assert await store.threads.set_generated_title(ALICE, "t1", "Generated")
    thread = await store.threads.get_thread(ALICE, "t1")
    assert (thread.title, thread.title_source, thread.metadata) == ("Generated", "generated", {"team": "blue"})

"""Contract of the thread as a tree (``ThreadStore``: parents, the current leaf, ``set_leaf``), the same cases
against ``InMemoryThreads`` and ``DynamoDBThreads`` (moto), and the readers of one branch on top of each
(``shared.context_window.BranchReader``, ``shared.branch_history``)."""

from __future__ import annotations

import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.in_memory.store import InMemoryStore
from shared.branch_history import branch_page
from shared.context_window import BranchReader
from shared.errors import Conflict, NotFound
from shared.models import Role
from tests.support.table_stores import (
    ALICE,
    BOB,
    a_run,
    msg,
    table_store_fixture,  # noqa: F401  (the `store` fixture)
)

Store = InMemoryStore | DynamoDBStore


async def branch(store: Store, leaf: str | None = None) -> list[str]:
    """The ids of the branch ending at ``leaf`` (None: the current one), oldest first, read as the window reads."""
    thread = await store.threads.get_thread(ALICE, "t1")
    reader = BranchReader(store.threads, leaf if leaf is not None else thread.leaf_id)
    newest_first: list[str] = []
    before: int | None = None
    while True:  # pages of 2, so a branch is read across pages and past other branches' messages
        page = await reader.read_back("tenant-a", "t1", before_seq=before, limit=2)
        newest_first += [m.id for m in page]
        if len(page) < 2:
            return newest_first[::-1]
        before = page[-1].seq


async def test_appends_link_each_message_to_the_one_before_and_move_the_leaf(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    first = await store.threads.append_messages(ALICE, "t1", [msg("u1"), msg("a1", role=Role.ASSISTANT)])
    second = await store.threads.append_messages(ALICE, "t1", [msg("u2")])
    assert [(m.id, m.parent_id) for m in first + second] == [("u1", None), ("a1", "u1"), ("u2", "a1")]
    assert (await store.threads.get_thread(ALICE, "t1")).leaf_id == "u2"
    assert not (await store.threads.get_thread(ALICE, "t1")).branched


async def test_an_edit_is_a_sibling_and_the_new_branch_is_current(store: Store) -> None:
    # GIVEN u1 -> a1 -> u2 -> a2
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(
        ALICE, "t1", [msg("u1"), msg("a1", role=Role.ASSISTANT), msg("u2"), msg("a2", role=Role.ASSISTANT)]
    )
    # WHEN u2 is edited (a new message whose parent is a1) and answered
    edited = msg("u2b").model_copy(update={"parent_id": "a1"})
    await store.threads.append_messages(ALICE, "t1", [edited])
    await store.threads.append_messages(ALICE, "t1", [msg("a2b", role=Role.ASSISTANT)])
    # THEN the current branch is the edited one, read page by page past the old branch; the old one is kept
    thread = await store.threads.get_thread(ALICE, "t1")
    assert (thread.leaf_id, thread.branched) == ("a2b", True)
    assert await branch(store) == ["u1", "a1", "u2b", "a2b"]
    assert await branch(store, "a2") == ["u1", "a1", "u2", "a2"]
    # AND the history's page carries parents and siblings
    page = await branch_page(store.threads, thread, leaf_id=None, after_seq=0, limit=10)
    assert [(m.id, m.parent_id) for m in page.messages] == [("u1", None), ("a1", "u1"), ("u2b", "a1"), ("a2b", "u2b")]
    assert page.siblings == {"u2b": ("u2", "u2b")}


async def test_an_edit_of_the_first_message_is_a_second_root(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg("u1"), msg("a1", role=Role.ASSISTANT)])
    await store.threads.append_messages(ALICE, "t1", [msg("u1b").model_copy(update={"parent_id": None})])
    assert await branch(store) == ["u1b"]
    thread = await store.threads.get_thread(ALICE, "t1")
    page = await branch_page(store.threads, thread, leaf_id=None, after_seq=0, limit=10)
    assert page.siblings == {"u1b": ("u1", "u1b")}


async def test_a_regenerate_admission_moves_the_leaf_to_the_question(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg("u1"), msg("a1", role=Role.ASSISTANT)])
    claim = await store.threads.open_and_claim(ALICE, "t1", "r2", stale_before=a_run("x").created_at)
    assert claim is not None and claim.leaf_id == "a1"
    _run, created, _ = await store.threads.admit_messages(
        ALICE, "t1", [], a_run("r2"), last_seq=claim.last_seq, last_leaf=claim.leaf_id, leaf_after="u1"
    )
    # WHEN the run's answer is appended
    await store.threads.append_messages(ALICE, "t1", [msg("a1b", role=Role.ASSISTANT)])
    assert created
    assert await branch(store) == ["u1", "a1b"]
    assert await branch(store, "a1") == ["u1", "a1"]


async def test_set_leaf_switches_branches_and_the_next_message_follows_it(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg("u1"), msg("a1", role=Role.ASSISTANT)])
    await store.threads.append_messages(ALICE, "t1", [msg("u1b").model_copy(update={"parent_id": None})])
    switched = await store.threads.set_leaf(ALICE, "t1", "a1", holder=None)
    assert (switched.leaf_id, switched.branched) == ("a1", True)
    stored = await store.threads.append_messages(ALICE, "t1", [msg("u2")])
    assert stored[0].parent_id == "a1"
    assert await branch(store) == ["u1", "a1", "u2"]


async def test_set_leaf_refuses_unknown_foreign_and_busy(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg("u1")])
    await store.threads.open_thread(BOB, "t2")
    await store.threads.append_messages(BOB, "t2", [msg("b1", "t2")])
    with pytest.raises(NotFound):
        await store.threads.set_leaf(ALICE, "t1", "nope", holder=None)
    with pytest.raises(NotFound):
        await store.threads.set_leaf(ALICE, "t1", "b1", holder=None)  # a message of another thread
    with pytest.raises(NotFound):
        await store.threads.set_leaf(ALICE, "t2", "b1", holder=None)  # another user's thread
    assert await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=a_run("x").created_at)
    with pytest.raises(Conflict):
        await store.threads.set_leaf(ALICE, "t1", "u1", holder=None)
    assert (await store.threads.set_leaf(ALICE, "t1", "u1", holder="r1")).leaf_id == "u1"


async def test_the_user_digest_is_kept_with_an_admission_and_dropped_by_a_branch_switch(store: Store) -> None:
    """Admission's digest of the client's user messages (shared.runs.known_ids): written in the admission's
    transaction, returned by the next claim, and removed when another branch is made current."""
    stale = a_run("x").created_at
    first = await store.threads.open_and_claim(ALICE, "t1", "r1", stale_before=stale)
    assert first is not None and first.user_digest is None
    await store.threads.admit_messages(ALICE, "t1", [msg("u1")], a_run("r1"), last_seq=0, user_digest="d-1")
    await store.threads.release_thread("tenant-a", "t1", "r1")
    second = await store.threads.open_and_claim(ALICE, "t1", "r2", stale_before=stale)
    assert second is not None and second.user_digest == "d-1"
    # A run that keeps none (an automation run) leaves it as it was
    await store.threads.admit_messages(ALICE, "t1", [msg("u2")], a_run("r2"), last_seq=1, last_leaf="u1")
    await store.threads.release_thread("tenant-a", "t1", "r2")
    third = await store.threads.open_and_claim(ALICE, "t1", "r3", stale_before=stale)
    assert third is not None and third.user_digest == "d-1"
    await store.threads.release_thread("tenant-a", "t1", "r3")
    await store.threads.set_leaf(ALICE, "t1", "u1", holder=None)
    fourth = await store.threads.open_and_claim(ALICE, "t1", "r4", stale_before=stale)
    assert fourth is not None and fourth.user_digest is None

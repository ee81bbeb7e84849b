"""Contract of ``ThreadStore.set_feedback`` (issue 45): feedback on an answer is stored on the message, replaced,
removed, and refused for another user's thread, a hidden message or a message that is not an answer, against
``InMemoryThreads`` and ``DynamoDBThreads`` (moto) alike."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.in_memory.store import InMemoryStore
from shared.errors import InvalidRequest, NotFound
from shared.models import ExecutionMeta, Feedback, Role, utc_now
from tests.support.table_stores import (
    ALICE,
    ALICE_ELSEWHERE,
    BOB,
    msg,
    table_store_fixture,  # noqa: F401  (the `store` fixture)
)

Store = InMemoryStore | DynamoDBStore


async def _exchange(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    hidden = msg("m3", content="hidden", role=Role.ASSISTANT).model_copy(
        update={"meta": ExecutionMeta(hidden_from_user=True)}
    )
    await store.threads.append_messages(
        ALICE, "t1", [msg("m1", content="question"), msg("m2", content="answer", role=Role.ASSISTANT), hidden]
    )


async def _feedback_on(store: Store, message_id: str) -> Feedback | None:
    stored = await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=10)
    return next(m for m in stored if m.id == message_id).feedback


async def test_feedback_is_stored_on_the_answer_replaced_and_removed(store: Store) -> None:
    await _exchange(store)
    up = Feedback(score=1, comment="spot on", tags=("accurate",), user_id="alice")
    returned = await store.threads.set_feedback(ALICE, "t1", "m2", up)
    assert returned.feedback == up and await _feedback_on(store, "m2") == up
    down = Feedback(score=-1, user_id="alice")
    await store.threads.set_feedback(ALICE, "t1", "m2", down)
    assert await _feedback_on(store, "m2") == down
    await store.threads.set_feedback(ALICE, "t1", "m2", None)
    assert await _feedback_on(store, "m2") is None
    assert await _feedback_on(store, "m1") is None


async def test_feedback_on_another_users_thread_a_hidden_or_unknown_message_is_not_found(store: Store) -> None:
    await _exchange(store)
    for who, message_id in ((BOB, "m2"), (ALICE_ELSEWHERE, "m2"), (ALICE, "m3"), (ALICE, "nope")):
        with pytest.raises(NotFound):
            await store.threads.set_feedback(who, "t1", message_id, Feedback(score=1, user_id=who.user_id))
    assert await _feedback_on(store, "m3") is None and await _feedback_on(store, "m2") is None


async def test_feedback_on_a_question_is_refused(store: Store) -> None:
    await _exchange(store)
    with pytest.raises(InvalidRequest) as refused:
        await store.threads.set_feedback(ALICE, "t1", "m1", Feedback(score=1, user_id="alice"))
    assert refused.value.code == "not_an_answer"


async def test_feedback_goes_with_the_thread(store: Store) -> None:
    await _exchange(store)
    await store.threads.set_feedback(ALICE, "t1", "m2", Feedback(score=1, user_id="alice"))
    assert await store.threads.claim_thread(ALICE, "t1", "erase-1", stale_before=utc_now() - timedelta(minutes=15))
    await store.threads.delete_thread(ALICE, "t1", holder="erase-1")
    assert await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=10) == []

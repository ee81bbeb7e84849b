"""Contract of ``ThreadStore.set_feedback`` and ``list_feedback`` (issue 45): feedback on an answer is stored on the
message, replaced, removed, and refused for another user's thread, a hidden message or a message that is not an
answer; the tenant's export lists it by time with the answer's run, profile and model, one tenant only, and forgets
it with its thread; against ``InMemoryThreads`` and ``DynamoDBThreads`` (moto) alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.in_memory.store import InMemoryStore
from shared.errors import InvalidRequest, NotFound
from shared.models import ExecutionMeta, Feedback, FeedbackEntry, Identity, Role, Usage, utc_now
from tests.support.table_stores import (
    ALICE,
    ALICE_ELSEWHERE,
    BOB,
    a_run,
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


# ---- the tenant's export (``list_feedback``) --------------------------------------------------------------------

EPOCH = datetime(2026, 12, 1, tzinfo=UTC)
WIDE = {"since": EPOCH - timedelta(days=1), "until": EPOCH + timedelta(days=1)}


async def _answered(store: Store, who: Identity, thread_id: str, *, model: str | None = "qwen3.5-flash") -> None:
    """A question and an answer stored by run ``r-{thread}``, whose ledger record names ``model`` (last)."""
    run_id = f"r-{thread_id}"
    await store.runs.create_run(a_run(run_id, thread_id, who))
    usage = [Usage(model="qwen3.5-30b-a3b"), Usage(model=model)] if model else []
    await store.runs.finish_run(who.tenant_id, run_id, status="succeeded", usage=usage, last_stream_id=None)
    meta = ExecutionMeta(execution_profile_name="chat_fast")
    await store.threads.open_thread(who, thread_id)
    await store.threads.append_messages(
        who,
        thread_id,
        [
            msg(f"q-{thread_id}", thread_id),
            msg(f"a-{thread_id}", thread_id, role=Role.ASSISTANT).model_copy(update={"run_id": run_id, "meta": meta}),
        ],
    )


def _given(who: Identity, minutes: int, score: Literal[1, -1] = 1) -> Feedback:
    return Feedback(score=score, user_id=who.user_id, created_at=EPOCH + timedelta(minutes=minutes))


async def test_the_export_lists_feedback_with_its_run_profile_and_model_as_replaced(store: Store) -> None:
    # GIVEN two answers, one judged and judged again, the other judged then un-judged
    await _answered(store, ALICE, "t1")
    await _answered(store, BOB, "t2", model=None)
    await store.threads.set_feedback(ALICE, "t1", "a-t1", _given(ALICE, 1))
    replaced = Feedback(score=-1, comment="wrong", tags=("facts",), user_id="alice", created_at=EPOCH + timedelta(2))
    await store.threads.set_feedback(ALICE, "t1", "a-t1", replaced)
    await store.threads.set_feedback(BOB, "t2", "a-t2", _given(BOB, 3))
    await store.threads.set_feedback(BOB, "t2", "a-t2", None)
    await store.threads.set_feedback(BOB, "t2", "a-t2", _given(BOB, 4))
    # WHEN the tenant's feedback is listed
    entries, after = await store.threads.list_feedback(
        "tenant-a", since=EPOCH, until=EPOCH + timedelta(3), limit=10, after=None
    )
    # THEN one entry per judged answer, oldest first, as last given, with what produced the answer
    assert after is None
    assert entries == [
        FeedbackEntry("t2", "a-t2", _given(BOB, 4), "r-t2", "chat_fast", None),
        FeedbackEntry("t1", "a-t1", replaced, "r-t1", "chat_fast", "qwen3.5-flash"),
    ]


async def test_removed_feedback_leaves_the_export(store: Store) -> None:
    await _answered(store, ALICE, "t1")
    await store.threads.set_feedback(ALICE, "t1", "a-t1", _given(ALICE, 1))
    await store.threads.set_feedback(ALICE, "t1", "a-t1", None)
    assert await store.threads.list_feedback("tenant-a", **WIDE, limit=10, after=None) == ([], None)


async def test_the_export_holds_only_the_tenants_feedback_of_the_range_page_by_page(store: Store) -> None:
    # GIVEN five judged answers in tenant-a (minutes 0..4) and one, at the same times, in tenant-b
    for i in range(5):
        await _answered(store, ALICE, f"t{i}")
        await store.threads.set_feedback(ALICE, f"t{i}", f"a-t{i}", _given(ALICE, i))
    await _answered(store, ALICE_ELSEWHERE, "t1")
    await store.threads.set_feedback(ALICE_ELSEWHERE, "t1", "a-t1", _given(ALICE_ELSEWHERE, 2))
    # WHEN minutes 1 (included) to 4 (excluded) are read two at a time
    since, until = EPOCH + timedelta(minutes=1), EPOCH + timedelta(minutes=4)
    first, after = await store.threads.list_feedback("tenant-a", since=since, until=until, limit=2, after=None)
    assert after is not None
    second, last = await store.threads.list_feedback("tenant-a", since=since, until=until, limit=2, after=after)
    # THEN minutes 1, 2, 3 of tenant-a, each once, in order; tenant-b's never
    assert [e.thread_id for e in first + second] == ["t1", "t2", "t3"]
    assert last is None
    assert all(e.feedback.user_id == "alice" for e in first + second)
    other, _ = await store.threads.list_feedback("tenant-b", **WIDE, limit=10, after=None)
    assert [(e.thread_id, e.feedback.created_at) for e in other] == [("t1", EPOCH + timedelta(minutes=2))]


async def test_the_export_forgets_a_deleted_threads_feedback(store: Store) -> None:
    await _answered(store, ALICE, "t1")
    await store.threads.set_feedback(ALICE, "t1", "a-t1", _given(ALICE, 1))
    assert await store.threads.claim_thread(ALICE, "t1", "erase-1", stale_before=utc_now() - timedelta(minutes=15))
    await store.threads.delete_thread(ALICE, "t1", holder="erase-1")
    assert await store.threads.list_feedback("tenant-a", **WIDE, limit=10, after=None) == ([], None)

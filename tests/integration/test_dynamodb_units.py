"""Read and write units of a plain turn, counted with the project's DynamoDB meter (``bench/dynamo_meter.py``) on
moto, and the requests of the same turn on the in-memory store: the known-message check reads only what admission
has not read already (shared/runs/known_ids.py).

A plain turn here is what ``bench.turn_counts`` measures, at the store's level: a thread of 30 turns, the client
resending its last 20 user messages and one new one; admission claims with the newest page, stores, the answer is
appended, the thread released.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.adapters.in_memory.store import InMemoryStore
from shared.models import Message, Role
from tests.support.metered_table import message, metered_store, plain_turn, seed, units_on


class CountingKnownIds:
    """Wraps a store's threads, recording every lookup of ids: ``known_message_ids`` and ``stored_messages`` (the
    ids the page could not place are read whole, to compare a user message's text too)."""

    def __init__(self, threads: Any) -> None:
        self._threads = threads
        self.asked: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._threads, name)

    async def known_message_ids(self, tenant_id: str, thread_id: str, ids: Any) -> set[str]:
        self.asked.append(list(ids))
        known: set[str] = await self._threads.known_message_ids(tenant_id, thread_id, ids)
        return known

    async def stored_messages(self, tenant_id: str, thread_id: str, ids: Any) -> list[Message]:
        self.asked.append(list(ids))
        found: list[Message] = await self._threads.stored_messages(tenant_id, thread_id, ids)
        return found


async def test_a_plain_turn_reads_no_message_id_on_dynamodb(aws: Any) -> None:
    # GIVEN a thread of 30 turns on DynamoDB (moto), metered
    store, meter = metered_store(aws)
    meter.enabled = False
    users = await seed(store, 30)
    meter.enabled = True
    before = meter.snapshot()
    # WHEN a plain turn resends the last 20 user messages with a new one
    stored = await plain_turn(store, "r1", users[-20:], message("new-1"))
    turn = meter.snapshot().minus(before)
    # THEN only the new message is stored, no id marker is read, and the turn reads at most 20 units
    assert stored == ["new-1"]
    assert turn.units_by_op.get("BatchGetItem", 0.0) == 0.0, turn.units_by_op
    assert turn.requests["BatchGetItem"] == 0
    assert turn.rru <= 20, (turn.rru, turn.units_by_op)


async def test_a_plain_turn_moves_the_thread_in_the_thread_list_once_and_never_touches_gsi1(aws: Any) -> None:
    # GIVEN a thread of 30 turns on DynamoDB (moto), metered
    store, meter = metered_store(aws)
    meter.enabled = False
    users = await seed(store, 30)
    meter.enabled = True
    before = meter.snapshot()
    # WHEN a plain turn runs (claim, admission's transaction, the answer's append, the release)
    await plain_turn(store, "r1", users[-20:], message("new-1"))
    turn = meter.snapshot().minus(before)
    # THEN the user's thread list costs 2 index write units (the release moves it: a delete and a put of a small
    # entry), GSI1 holds no thread, and the index writes of the turn are that move and the run's own entries
    assert units_on(turn, "agent-test/GSI3:T#*#U#*#THREADS") == 2.0, turn.units_by_pattern
    assert units_on(turn, "agent-test/GSI1:T#*#U#*#THREADS") == 0.0, turn.units_by_pattern
    assert turn.index_wru == 2.0 + units_on(turn, "agent-test/GSI1:T#*#TH#*#RUNS") + units_on(turn, "agent-test/GSI2")


async def test_a_plain_turn_asks_the_store_for_no_message_id_on_either_backend(store: Any) -> None:
    # GIVEN a thread of 30 turns (the contract's backends: in memory and DynamoDB on moto)
    users = await seed(store, 30)
    counting = CountingKnownIds(store.threads)
    store.threads = counting
    # WHEN a plain turn resends the last 20 user messages with a new one
    stored = await plain_turn(store, "r1", users[-20:], message("new-1"))
    # THEN the new message alone is stored and no id was looked up
    assert stored == ["new-1"]
    assert counting.asked == []


async def test_the_in_memory_claim_costs_the_claim_and_the_page_only() -> None:
    # GIVEN a thread of 30 turns in memory (its meter counts the requests DynamoDB would get)
    store = InMemoryStore()
    users = await seed(store, 30)
    counting = CountingKnownIds(store.threads)
    store.threads = counting  # type: ignore[assignment]
    before = store.request_count
    # WHEN a plain turn is admitted, answered and released
    await plain_turn(store, "r1", users[-20:], message("new-1"))
    # THEN: claim, newest page, one transaction (admission), counter read and transaction (answer), release
    assert store.request_count - before == 6


async def test_a_client_that_sends_only_its_new_message_on_a_long_thread_has_it_checked(store: Any) -> None:
    # GIVEN a thread longer than admission's page
    await seed(store, 30)
    counting = CountingKnownIds(store.threads)
    store.threads = counting
    # WHEN a client sends only an old message again and a new one (none of them in the newest page)
    stored = await plain_turn(store, "r1", [message("u0")], message("new-1"))
    # THEN the page cannot place them: both ids are checked, and only the new one is stored
    assert counting.asked == [["u0", "new-1"]]
    assert stored == ["new-1"]


async def test_a_client_that_reorders_its_history_stores_no_duplicate(store: Any) -> None:
    # GIVEN a thread longer than admission's page
    users = await seed(store, 30)
    # WHEN a client lists an old stored message after messages of the newest page, then a new one
    resent: list[Message] = [*users[-5:], users[0]]
    await plain_turn(store, "r1", resent, message("new-1"))
    # THEN the thread holds each message once: the old one's id marker dropped it from the append
    stored = await store.threads.read_forward("tenant-a", "th", after_seq=0, limit=200)
    ids = [m.id for m in stored]
    assert len(ids) == len(set(ids)) and ids[-2:] == ["new-1", "answer-r1"]


@pytest.fixture(name="store", params=["memory", "dynamodb"])
def _store(request: pytest.FixtureRequest) -> Any:
    from tests.support.table_stores import store_on

    return store_on(str(request.param), request)


async def test_a_client_resending_its_whole_long_history_reads_its_older_questions_once_then_none(aws: Any) -> None:
    # GIVEN a thread of 30 turns on DynamoDB (moto), metered; a client that holds the whole conversation
    store, meter = metered_store(aws)
    meter.enabled = False
    users = await seed(store, 30)
    meter.enabled = True
    held: list[Message] = []
    for i, user in enumerate(users):
        held += [user, message(f"a{i}", Role.ASSISTANT)]
    turns = []
    # WHEN it sends everything with each of three new questions (its answers in the list as they come)
    for i in range(3):
        before = meter.snapshot()
        new = message(f"new-{i}")
        await plain_turn(store, f"r{i}", held, new)
        turns.append(meter.snapshot().minus(before))
        held += [new, message(f"answer-r{i}", Role.ASSISTANT)]
    # THEN the first turn (no digest kept yet) reads the questions older than the page, two batch reads; the
    # next ones are vouched for by the digest and read none, as a plain turn
    batch_units = [t.units_by_op.get("BatchGetItem", 0.0) for t in turns]
    assert turns[0].requests["BatchGetItem"] == 2 and batch_units[0] > 0
    assert [t.requests["BatchGetItem"] for t in turns[1:]] == [0, 0] and batch_units[1:] == [0.0, 0.0]
    assert all(t.rru <= 20 for t in turns[1:]), [t.rru for t in turns]

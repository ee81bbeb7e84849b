"""Contract of the thread-state port: the same cases against the in-memory fake and DynamoDB (moto)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.adapters.aws.thread_state import DynamoDBThreadStates
from shared.adapters.in_memory.thread_state import InMemoryThreadStates
from shared.errors import Conflict, NotFound
from shared.models import Identity
from shared.thread_state.models import StoredState

States = InMemoryThreadStates | DynamoDBThreadStates
ALICE = Identity(tenant_id="t", user_id="alice")
MALLORY = Identity(tenant_id="t", user_id="mallory")
OTHER_TENANT_ALICE = Identity(tenant_id="t2", user_id="alice")


@pytest.fixture(params=["memory", "dynamodb"])
def states(request: pytest.FixtureRequest) -> States:
    if request.param == "memory":
        return InMemoryThreadStates()
    store: Any = request.getfixturevalue("store")
    threads = store.threads
    return DynamoDBThreadStates(threads.table_name, lambda: threads.client)


async def test_a_state_is_stored_whole_and_each_write_raises_the_version(states: States) -> None:
    assert await states.read(ALICE, "th") is None
    first = {"title": "Café ☕", "n": 1, "ratio": 0.5, "big": 12345678901234567890, "list": [True, None, {"a": []}]}
    assert await states.write(ALICE, "th", first, expected_version=None) == StoredState(first, 1)
    assert await states.read(ALICE, "th") == StoredState(first, 1)
    assert await states.write(ALICE, "th", {"n": 2}, expected_version=1) == StoredState({"n": 2}, 2)
    # a client's state replaces whatever is stored, whatever its version
    assert await states.write(ALICE, "th", {"n": 3}, expected_version=None) == StoredState({"n": 3}, 3)
    assert await states.read(ALICE, "th") == StoredState({"n": 3}, 3)


async def test_a_write_from_a_stale_version_is_a_conflict_and_changes_nothing(states: States) -> None:
    await states.write(ALICE, "th", {"n": 1}, expected_version=None)
    for stale in (0, 2):
        with pytest.raises(Conflict) as raised:
            await states.write(ALICE, "th", {"n": 99}, expected_version=stale)
        assert raised.value.code == "state_version_conflict"
    assert await states.read(ALICE, "th") == StoredState({"n": 1}, 1)
    # a first write that expects none stored succeeds on a thread without state
    assert await states.write(ALICE, "th-new", {"a": 1}, expected_version=0) == StoredState({"a": 1}, 1)


async def test_another_users_state_is_neither_readable_nor_writable(states: States) -> None:
    await states.write(ALICE, "th", {"secret": 1}, expected_version=None)
    assert await states.read(MALLORY, "th") is None
    for expected in (None, 0, 1):
        with pytest.raises(NotFound):
            await states.write(MALLORY, "th", {"secret": 2}, expected_version=expected)
    assert await states.read(ALICE, "th") == StoredState({"secret": 1}, 1)
    # the same thread id in another tenant is another thread
    assert await states.read(OTHER_TENANT_ALICE, "th") is None


async def test_delete_forgets_the_state_and_is_idempotent(states: States) -> None:
    await states.write(ALICE, "th", {"n": 1}, expected_version=None)
    await states.delete("t", "th")
    await states.delete("t", "th")
    assert await states.read(ALICE, "th") is None
    assert await states.write(ALICE, "th", {"n": 1}, expected_version=0) == StoredState({"n": 1}, 1)

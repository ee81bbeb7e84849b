"""Contract of the pending-extraction marker: the same cases against the in-memory reference and DynamoDB (moto)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import boto3
import pytest

from shared.adapters.aws.memory_pending import DynamoDBPendingExtractions
from shared.adapters.in_memory.pending_extractions import InMemoryPendingExtractions
from tests.support.settings import REGION, TABLE

Pending = InMemoryPendingExtractions | DynamoDBPendingExtractions
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["memory", "dynamodb"])
def pending(request: pytest.FixtureRequest) -> Pending:
    if request.param == "memory":
        return InMemoryPendingExtractions()
    request.getfixturevalue("aws")
    return DynamoDBPendingExtractions(TABLE, lambda: cast(Any, boto3.client("dynamodb", region_name=REGION)))


async def test_each_note_raises_the_generation_and_the_marker_remembers_the_last(pending: Pending) -> None:
    assert await pending.get("t", "th") is None
    assert [await pending.note("t", "u", "th", now=T0 + timedelta(seconds=i)) for i in range(3)] == [1, 2, 3]
    marker = await pending.get("t", "th")
    assert marker is not None
    assert (marker.user_id, marker.generation, marker.noted_at) == ("u", 3, T0 + timedelta(seconds=2))
    assert marker.running_run_id is None
    # another thread (and another tenant's thread of the same id) has its own count
    assert await pending.note("t", "u", "th-2", now=T0) == 1
    assert await pending.note("t2", "u", "th", now=T0) == 1


async def test_one_lease_at_a_time_until_released_or_expired(pending: Pending) -> None:
    await pending.note("t", "u", "th", now=T0)
    until = T0 + timedelta(seconds=900)
    assert await pending.acquire("t", "th", "run-a", now=T0, lease_until=until)
    # GIVEN run-a holds the lease: another run cannot take it; run-a itself may take it again (a redelivery)
    assert not await pending.acquire("t", "th", "run-b", now=T0 + timedelta(seconds=1), lease_until=until)
    assert await pending.acquire("t", "th", "run-a", now=T0 + timedelta(seconds=1), lease_until=until)
    marker = await pending.get("t", "th")
    assert marker is not None and marker.running(T0) and marker.running_run_id == "run-a"
    # a release by a run that does not hold it changes nothing
    await pending.release("t", "th", "run-b")
    assert not await pending.acquire("t", "th", "run-b", now=T0 + timedelta(seconds=2), lease_until=until)
    await pending.release("t", "th", "run-a")
    assert await pending.acquire("t", "th", "run-b", now=T0 + timedelta(seconds=3), lease_until=until)
    # an expired lease (a crashed run) can be taken over
    later = until + timedelta(seconds=1)
    assert await pending.acquire("t", "th", "run-c", now=later, lease_until=later + timedelta(seconds=900))


async def test_no_lease_without_a_marker_and_cancelling_the_thread_removes_it(pending: Pending) -> None:
    assert not await pending.acquire("t", "th", "run-a", now=T0, lease_until=T0 + timedelta(seconds=60))
    await pending.note("t", "u", "th", now=T0)
    await pending.cancel_thread("t", "th")
    assert await pending.get("t", "th") is None
    assert not await pending.acquire("t", "th", "run-a", now=T0, lease_until=T0 + timedelta(seconds=60))
    # noting again after a cancel starts over
    assert await pending.note("t", "u", "th", now=T0) == 1


async def test_cancelling_a_user_is_remembered_per_user(pending: Pending) -> None:
    assert await pending.user_cancelled_at("t", "u") is None
    await pending.cancel_user("t", "u", now=T0)
    assert await pending.user_cancelled_at("t", "u") == T0
    assert await pending.user_cancelled_at("t", "other") is None
    assert await pending.user_cancelled_at("t2", "u") is None


async def test_hold_opens_a_marker_at_generation_0_and_shares_the_one_lease_with_acquire(pending: Pending) -> None:
    until = T0 + timedelta(seconds=900)
    # GIVEN a thread with no marker  WHEN an automation's memory run holds it  THEN a marker at generation 0
    assert await pending.hold("t", "u", "th", "auto-1", now=T0, lease_until=until)
    marker = await pending.get("t", "th")
    assert marker is not None
    assert (marker.generation, marker.user_id, marker.running_run_id) == (0, "u", "auto-1")
    # AND the coalescer's run cannot take the lease, nor another hold; the same run may hold again
    assert not await pending.acquire("t", "th", "mem-1", now=T0, lease_until=until)
    assert not await pending.hold("t", "u", "th", "auto-2", now=T0, lease_until=until)
    assert await pending.hold("t", "u", "th", "auto-1", now=T0, lease_until=until)
    # WHEN a turn is noted meanwhile  THEN the generation counts on from 0 and the lease is kept
    assert await pending.note("t", "u", "th", now=T0 + timedelta(seconds=1)) == 1
    assert not await pending.acquire("t", "th", "mem-1", now=T0, lease_until=until)
    # WHEN released  THEN the coalescer's run takes it; a hold is then refused until that run releases
    await pending.release("t", "th", "auto-1")
    assert await pending.acquire("t", "th", "mem-1", now=T0, lease_until=until)
    assert not await pending.hold("t", "u", "th", "auto-2", now=T0, lease_until=until)
    await pending.release("t", "th", "mem-1")
    assert await pending.hold("t", "u", "th", "auto-2", now=T0, lease_until=until)
    # AND an expired lease can be held by another run
    assert await pending.hold("t", "u", "th", "auto-3", now=until, lease_until=until + timedelta(seconds=900))

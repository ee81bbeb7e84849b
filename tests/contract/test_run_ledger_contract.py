"""Contract of the run ledger port (``RunLedger``, shared/ports/runs.py): the same cases against
``InMemoryRunLedger`` and ``DynamoDBRunLedger`` (moto): run records, heartbeats, cancels, the stale-run sweep.

A case the DynamoDB adapter does not meet yet is marked ``xfail(strict=True)`` for that backend only, with the
reason, so the fake keeps the intended behaviour and the mark fails loudly once the adapter is fixed. Cases that
need another aggregate (a run to admit, a thread to audit) reach it through the same table's store.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.in_memory.store import InMemoryStore
from shared.errors import NotFound
from shared.models import (
    Identity,
    Run,
    RunStatus,
    Usage,
    utc_now,
)
from shared.ports import RunPosition
from tests.support.table_stores import (
    ALICE,
    ALICE_ELSEWHERE,
    a_run,
    table_store_fixture,  # noqa: F401  (the `store` fixture)
)

Store = InMemoryStore | DynamoDBStore


# ---- runs --------------------------------------------------------------------------------------------------


async def test_create_run_is_idempotent(store: Store) -> None:
    # GIVEN a created run
    run, created = await store.runs.create_run(a_run("r1", digest="first"))
    assert (run.run_id, created) == ("r1", True)
    # WHEN the same run id is created again with another body
    again, created_again = await store.runs.create_run(a_run("r1", digest="second"))
    # THEN the existing run comes back, unchanged, and nothing new was created
    assert created_again is False
    assert (again.run_id, again.body_digest) == ("r1", "first")
    stored = await store.runs.get_run("tenant-a", "r1")
    assert stored is not None
    assert stored.body_digest == "first"


async def test_get_run_is_scoped_to_the_tenant(store: Store) -> None:
    # GIVEN a run in tenant-a  WHEN tenant-b asks for the same run id  THEN there is none
    await store.runs.create_run(a_run("r1"))
    assert await store.runs.get_run("tenant-b", "r1") is None
    assert await store.runs.get_run("tenant-a", "missing") is None


async def test_finish_run_records_status_usage_and_last_stream_id(store: Store) -> None:
    # GIVEN a running run
    await store.runs.create_run(a_run("r1"))
    usage = [Usage(model="qwen-plus", input_tokens=120, output_tokens=30, reasoning_tokens=5, estimated=True)]
    # WHEN it finishes
    await store.runs.finish_run("tenant-a", "r1", status="succeeded", usage=usage, last_stream_id="1700000000000-3")
    # THEN the run reads back terminal, with its usage and where its stream ended
    run = await store.runs.get_run("tenant-a", "r1")
    assert run is not None
    assert (run.status, run.usage, run.last_stream_id, run.error_code) == (
        RunStatus.SUCCEEDED,
        usage,
        "1700000000000-3",
        None,
    )


async def test_finish_run_records_the_error_code_of_a_failed_run(store: Store) -> None:
    # GIVEN a running run  WHEN it fails with an error code
    await store.runs.create_run(a_run("r1"))
    await store.runs.finish_run(
        "tenant-a", "r1", status="failed", usage=[], last_stream_id=None, error_code="model_error"
    )
    # THEN status and code are recorded
    run = await store.runs.get_run("tenant-a", "r1")
    assert run is not None
    assert (run.status, run.error_code, run.last_stream_id) == (RunStatus.FAILED, "model_error", None)


async def test_heartbeat_moves_heartbeat_at_and_keeps_the_last_stream_id(store: Store) -> None:
    # GIVEN a run created a moment ago
    created, _ = await store.runs.create_run(a_run("r1"))
    await asyncio.sleep(0.002)
    # WHEN it beats with a stream id, then without one
    await store.runs.heartbeat("tenant-a", "r1", last_stream_id="1-1")
    await store.runs.heartbeat("tenant-a", "r1", last_stream_id=None)
    # THEN heartbeat_at moved on and the last known stream id is kept
    run = await store.runs.get_run("tenant-a", "r1")
    assert run is not None
    assert run.heartbeat_at > created.heartbeat_at
    assert run.last_stream_id == "1-1"


async def test_request_cancel_sets_cancel_requested(store: Store) -> None:
    # GIVEN a running run that nobody asked to stop
    await store.runs.create_run(a_run("r1"))
    before = await store.runs.get_run("tenant-a", "r1")
    assert before is not None
    assert before.cancel_requested is False
    # WHEN a cancel is requested
    await store.runs.request_cancel("tenant-a", "r1")
    # THEN the flag is set and the run is still running (the executor ends it)
    after = await store.runs.get_run("tenant-a", "r1")
    assert after is not None
    assert (after.cancel_requested, after.status) == (True, RunStatus.RUNNING)


async def test_list_runs_for_thread_lists_that_threads_runs_oldest_first(store: Store) -> None:
    # GIVEN two runs on t1 whose ids sort against their creation order, one on t2, and one on t1 of another tenant
    older = a_run("run-b")
    newer = a_run("run-a").model_copy(update={"created_at": older.created_at + timedelta(seconds=1)})
    for run in (newer, older, a_run("r3", thread_id="t2"), a_run("r4", identity=ALICE_ELSEWHERE)):
        await store.runs.create_run(run)
    # WHEN listing t1's runs  THEN only those two, oldest first, and the limit holds
    assert [r.run_id for r in await store.runs.list_runs_for_thread("tenant-a", "t1", limit=10)] == ["run-b", "run-a"]
    assert [r.run_id for r in await store.runs.list_runs_for_thread("tenant-a", "t1", limit=1)] == ["run-b"]


async def test_page_thread_runs_lists_newest_first_below_a_position(store: Store) -> None:
    # GIVEN three runs on t1 whose ids sort against their creation order, one on t2, and one of another tenant on t1
    first = a_run("run-c")
    second = a_run("run-b").model_copy(update={"created_at": first.created_at + timedelta(seconds=1)})
    third = a_run("run-a").model_copy(update={"created_at": first.created_at + timedelta(seconds=2)})
    for run in (second, third, first, a_run("r4", thread_id="t2"), a_run("r5", identity=ALICE_ELSEWHERE)):
        await store.runs.create_run(run)
    # WHEN paging t1's runs two at a time
    page = await store.runs.page_thread_runs("tenant-a", "t1", limit=2)
    assert [r.run_id for r in page] == ["run-a", "run-b"]
    below = RunPosition(created_at=page[-1].created_at, run_id=page[-1].run_id)
    rest = await store.runs.page_thread_runs("tenant-a", "t1", limit=2, below=below)
    # THEN newest first, each run once, only t1's of tenant-a
    assert [r.run_id for r in rest] == ["run-c"]


async def test_finish_run_keeps_what_the_outcome_left_open(store: Store) -> None:
    # GIVEN two running runs
    await store.runs.create_run(a_run("r1"))
    await store.runs.create_run(a_run("r2"))
    interrupt = {"id": "int_1", "reason": "tool_approval", "toolCallId": "call_9"}
    # WHEN one ends on an interrupt and the other hands two front-end tool calls to the client
    await store.runs.finish_run(
        "tenant-a", "r1", status="succeeded", usage=[], last_stream_id="1-0", interrupts=[interrupt]
    )
    await store.runs.finish_run(
        "tenant-a", "r2", status="succeeded", usage=[], last_stream_id="1-0", pending_tool_call_ids=["c1", "c2"]
    )
    # THEN each record reads back with them, and a run that left nothing open has neither
    r1, r2 = await store.runs.get_run("tenant-a", "r1"), await store.runs.get_run("tenant-a", "r2")
    assert r1 is not None and r2 is not None
    assert (r1.interrupts, r1.pending_tool_call_ids) == ([interrupt], [])
    assert (r2.interrupts, r2.pending_tool_call_ids) == ([], ["c1", "c2"])
    await store.runs.create_run(a_run("r3"))
    await store.runs.finish_run("tenant-a", "r3", status="cancelled", usage=[], last_stream_id=None)
    r3 = await store.runs.get_run("tenant-a", "r3")
    assert r3 is not None
    assert (r3.status, r3.interrupts, r3.pending_tool_call_ids) == (RunStatus.CANCELLED, [], [])


async def test_a_runs_admission_counter_round_trips(store: Store) -> None:
    # GIVEN a run admitted when its thread's counter was 7  WHEN read back  THEN it says so
    await store.runs.create_run(a_run("r1").model_copy(update={"after_seq": 7}))
    run = await store.runs.get_run("tenant-a", "r1")
    assert run is not None
    assert run.after_seq == 7


async def test_finishing_an_unknown_run_is_not_found_and_creates_nothing(store: Store) -> None:
    # GIVEN no run r404  WHEN it is finished  THEN NotFound, and still no run
    with pytest.raises(NotFound):
        await store.runs.finish_run("tenant-a", "r404", status="succeeded", usage=[], last_stream_id="1-0")
    assert await store.runs.get_run("tenant-a", "r404") is None


async def test_a_heartbeat_for_an_unknown_run_is_not_found_and_creates_nothing(store: Store) -> None:
    # GIVEN no run r404  WHEN it beats  THEN NotFound, and still no run
    with pytest.raises(NotFound):
        await store.runs.heartbeat("tenant-a", "r404", last_stream_id="1-0")
    assert await store.runs.get_run("tenant-a", "r404") is None


async def test_cancelling_an_unknown_run_is_not_found(store: Store) -> None:
    # GIVEN no run r404 in tenant-a (but one in tenant-b)
    await store.runs.create_run(a_run("r404", identity=ALICE_ELSEWHERE))
    # WHEN tenant-a asks to cancel it  THEN NotFound, and tenant-b's run is not touched
    with pytest.raises(NotFound):
        await store.runs.request_cancel("tenant-a", "r404")
    elsewhere = await store.runs.get_run("tenant-b", "r404")
    assert elsewhere is not None
    assert elsewhere.cancel_requested is False


# ---- stale runs (the sweeper) --------------------------------------------------------------------------------


def a_stale_run(run_id: str, identity: Identity = ALICE, minutes_ago: int = 30) -> Run:
    """A run created (and last heard of) ``minutes_ago``: what a process that died mid-run leaves behind."""
    then = utc_now() - timedelta(minutes=minutes_ago)
    return a_run(run_id, identity=identity).model_copy(update={"created_at": then, "heartbeat_at": then})


async def test_list_stale_runs_finds_running_runs_of_every_tenant_whose_heartbeat_stopped(store: Store) -> None:
    # GIVEN two stale running runs in two tenants, a stale run that finished, and a run that is still beating
    await store.runs.create_run(a_stale_run("dead-a", minutes_ago=40))
    await store.runs.create_run(a_stale_run("dead-b", identity=ALICE_ELSEWHERE, minutes_ago=30))
    await store.runs.create_run(a_stale_run("ended"))
    await store.runs.finish_run("tenant-a", "ended", status="succeeded", usage=[], last_stream_id=None)
    await store.runs.create_run(a_stale_run("alive"))
    await store.runs.heartbeat("tenant-a", "alive", last_stream_id=None)
    await store.runs.create_run(a_run("fresh"))
    # WHEN the sweeper lists runs without a heartbeat for ten minutes
    stale = await store.runs.list_stale_runs(stale_before=utc_now() - timedelta(minutes=10), limit=10)
    # THEN exactly the two dead runs come back, stalest first, and the limit holds
    assert [(r.tenant_id, r.run_id) for r in stale] == [("tenant-a", "dead-a"), ("tenant-b", "dead-b")]
    assert all(r.status is RunStatus.RUNNING for r in stale)
    limited = await store.runs.list_stale_runs(stale_before=utc_now() - timedelta(minutes=10), limit=1)
    assert [r.run_id for r in limited] == ["dead-a"]


async def test_abandon_run_ends_a_stale_run_exactly_once(store: Store) -> None:
    # GIVEN a stale running run
    await store.runs.create_run(a_stale_run("dead"))
    cutoff = utc_now() - timedelta(minutes=10)
    # WHEN two sweepers abandon it
    first = await store.runs.abandon_run("tenant-a", "dead", stale_before=cutoff, error_code="run_failed")
    second = await store.runs.abandon_run("tenant-a", "dead", stale_before=cutoff, error_code="run_failed")
    # THEN one of them did it, the run is failed with the code, and it is no longer listed as stale
    assert (first, second) == (True, False)
    run = await store.runs.get_run("tenant-a", "dead")
    assert run is not None
    assert (run.status, run.error_code) == (RunStatus.FAILED, "run_failed")
    assert await store.runs.list_stale_runs(stale_before=cutoff, limit=10) == []


async def test_abandon_run_leaves_live_ended_and_unknown_runs_alone(store: Store) -> None:
    # GIVEN a run that beats, a stale run that finished, and a stale run of another tenant
    await store.runs.create_run(a_run("alive"))
    await store.runs.create_run(a_stale_run("ended"))
    await store.runs.finish_run("tenant-a", "ended", status="succeeded", usage=[], last_stream_id=None)
    await store.runs.create_run(a_stale_run("theirs", identity=ALICE_ELSEWHERE))
    cutoff = utc_now() - timedelta(minutes=10)
    # WHEN a sweeper tries to abandon each (the last under the wrong tenant)
    results = [
        await store.runs.abandon_run("tenant-a", "alive", stale_before=cutoff, error_code="run_failed"),
        await store.runs.abandon_run("tenant-a", "ended", stale_before=cutoff, error_code="run_failed"),
        await store.runs.abandon_run("tenant-a", "theirs", stale_before=cutoff, error_code="run_failed"),
        await store.runs.abandon_run("tenant-a", "missing", stale_before=cutoff, error_code="run_failed"),
    ]
    # THEN nothing changed
    assert results == [False, False, False, False]
    statuses = [await store.runs.get_run("tenant-a", "alive"), await store.runs.get_run("tenant-a", "ended")]
    assert [r.status if r else None for r in statuses] == [RunStatus.RUNNING, RunStatus.SUCCEEDED]
    theirs = await store.runs.get_run("tenant-b", "theirs")
    assert theirs is not None and theirs.status is RunStatus.RUNNING
    assert await store.runs.get_run("tenant-a", "missing") is None

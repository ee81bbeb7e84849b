"""A reader never waits on a dead run (``shared.runs.dead_runs`` through ``StreamTail.tail_run``), on the in-memory
adapters: a run still ``running`` whose lease expired and that does not execute here is ended by its reader with the
takeover's repair, and the reader gets its ``RUN_ERROR`` ``run_failed``; a live run, or one executing here, is left
alone. The lifecycle tier checks the same across two frozen/thawed instances (tests/lambda_emulation)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.models import ExecutionMeta, Identity, Run, RunStatus, utc_now
from shared.ports import StreamEntry
from shared.runs.dead_runs import DeadRuns
from shared.runs.tailing import StreamTail
from shared.stream_keys import thread_stream_key

KEY = thread_stream_key("t", "th")
"""A visible run's home: its thread's stream, its events tagged with their run."""
R1 = {"metadata": {"runId": "r1"}}
LEASE = timedelta(seconds=2)


class KnownRuns:
    def __init__(self, *, running: bool = False) -> None:
        self.running = running

    def is_running(self, tenant_id: str, run_id: str) -> bool:
        return self.running

    def settled_here(self, tenant_id: str, run_id: str) -> bool:
        return False

    def feed(self, tenant_id: str, run_id: str) -> None:
        return None


async def a_running_run(store: InMemoryStore, stream: InMemoryEventStream, *, beat_ago_s: float) -> None:
    identity = Identity(tenant_id="t", user_id="u")
    await store.threads.open_and_claim(identity, "th", "r1", stale_before=utc_now() - timedelta(minutes=15))
    beat = utc_now() - timedelta(seconds=beat_ago_s)
    await store.runs.create_run(
        Run(run_id="r1", thread_id="th", tenant_id="t", user_id="u", meta=ExecutionMeta(), heartbeat_at=beat)
    )
    await stream.append(KEY, {"type": "RUN_STARTED", "threadId": "th", "runId": "r1", **R1})
    await stream.append(KEY, {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant", **R1})


def a_tail(store: InMemoryStore, stream: InMemoryEventStream, local: KnownRuns) -> StreamTail:
    return StreamTail(
        store.runs,
        stream,
        local,
        invocation_deadline=lambda: time.time() + 60,
        ping_interval_s=0.2,
        dead_runs=DeadRuns(store.threads, store.runs, store.audit, stream, lease=LEASE),
    )


async def collect(entries: Any, *, seconds: float) -> list[StreamEntry | None]:
    seen: list[StreamEntry | None] = []
    ends = time.monotonic() + seconds
    async for entry in entries:
        seen.append(entry)
        if time.monotonic() > ends:
            break
    return seen


async def test_a_reader_ends_a_run_whose_lease_expired_and_gets_run_error_run_failed() -> None:
    # GIVEN a run executing elsewhere whose last heartbeat is older than its lease
    store, stream = InMemoryStore(), InMemoryEventStream()
    await a_running_run(store, stream, beat_ago_s=10)
    # WHEN a reader tails it
    started = time.monotonic()
    seen = await collect(a_tail(store, stream, KnownRuns()).tail_run("t", "r1"), seconds=10)
    # THEN its tail ends with one RUN_ERROR run_failed, after the stream was closed as the takeover closes it
    events = [e.event for e in seen if e is not None]
    assert [e["type"] for e in events] == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_END", "RUN_ERROR"]
    assert events[-1]["code"] == "run_failed"
    assert time.monotonic() - started < 2.0
    # AND the run ended in the ledger, its thread released, the repair audited as done by a reader
    run = await store.runs.get_run("t", "r1")
    assert run is not None and run.status is RunStatus.FAILED and run.error_code == "run_failed"
    assert (await store.threads.get_thread(Identity(tenant_id="t", user_id="u"), "th")).active_run_id is None
    audit = [r for r in await store.audit.list_for_thread("t", "th", limit=50) if r.kind == "run_swept"]
    assert [r.details["ended_by"] for r in audit] == ["reader"]


async def test_a_reader_of_a_live_run_ends_it_only_once_its_lease_expires() -> None:
    # GIVEN a run executing elsewhere that beat 1 s ago (its 2 s lease ends in about 1 s)
    store, stream = InMemoryStore(), InMemoryEventStream()
    await a_running_run(store, stream, beat_ago_s=1)
    # WHEN a reader tails it and nobody renews the lease
    started = time.monotonic()
    seen = await collect(a_tail(store, stream, KnownRuns()).tail_run("t", "r1"), seconds=10)
    elapsed = time.monotonic() - started
    # THEN the reader got pings while the lease held, then the terminal event soon after it expired
    assert None in seen
    last = seen[-1]
    assert last is not None and last.event["type"] == "RUN_ERROR"
    assert 0.9 <= elapsed < 2.5, elapsed


async def test_a_run_executing_in_this_process_is_never_ended_by_its_reader() -> None:
    # GIVEN a run with a stale heartbeat that this process still executes
    store, stream = InMemoryStore(), InMemoryEventStream()
    await a_running_run(store, stream, beat_ago_s=10)
    # WHEN a reader tails it for a while
    seen = await collect(a_tail(store, stream, KnownRuns(running=True)).tail_run("t", "r1"), seconds=1.5)
    # THEN it gets only pings, and the run goes on
    assert [e for e in seen if e is not None and e.event["type"] == "RUN_ERROR"] == []
    run = await store.runs.get_run("t", "r1")
    assert run is not None and run.status is RunStatus.RUNNING

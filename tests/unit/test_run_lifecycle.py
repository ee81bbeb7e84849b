"""The run service's lifecycle, on the in-memory adapters (which run the same contract suite as DynamoDB/Redis):
the terminal event goes on the stream last, after every piece of bookkeeping; a cancel reaches a run in another
process through the Redis signal, and through the ledger when the signal is down; the heartbeat is one write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.executors.context import RunContext
from shared.executors.worker import ExecutionResult
from shared.models import ExecutorKind, RunStatus
from shared.run_events.emitter import RunEmitter, is_terminal
from shared.runs.service import RunService
from shared.stream_keys import run_control_key
from tests.support.run_rigs import USER, SaysHello, TalksUntilCancelled, a_context


class Journal:
    """Records, in order, the bookkeeping of a run and the moment its terminal event reached the stream."""

    def __init__(self, store: InMemoryStore, stream: InMemoryEventStream) -> None:
        self.entries: list[str] = []
        self.store = store
        self.stream = stream

    def wrap(self) -> None:
        self._record_calls(self.store.runs, "finish_run")
        self._record_calls(self.store.threads, "release_thread")
        self._record_calls(self.stream, "expire")
        original_append = self.stream.append

        async def append(key: str, event: dict[str, Any]) -> str:
            if is_terminal(event) and ":events" in key and key.startswith("run:"):
                self.entries.append("terminal")
            return await original_append(key, event)

        self.stream.append = append  # type: ignore[method-assign]
        original_batch = self.stream.append_batch

        async def append_batch(entries: Any, *, clear: str | None = None, encoded: Any = None) -> list[str]:
            for key, event in entries:
                if is_terminal(event) and ":events" in key:
                    self.entries.append("terminal")  # once: a hidden run's also goes to its thread's stream
                    break
            return await original_batch(entries, clear=clear, encoded=encoded)

        self.stream.append_batch = append_batch  # type: ignore[method-assign]

    def _record_calls(self, target: Any, name: str) -> None:
        original = getattr(target, name)

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            # Not retention: admission's clearing of a stale stream, and the expiry of the run's control stream
            # (set when its watcher stops, before the run settles).
            if not (name == "expire" and (args[1] == 0 or str(args[0]).endswith(":control"))):
                self.entries.append(name)
            return await original(*args, **kwargs)

        setattr(target, name, recorded)


@pytest.fixture
def journal() -> Journal:
    j = Journal(InMemoryStore(), InMemoryEventStream())
    j.wrap()
    return j


def service(journal: Journal, **kwargs: Any) -> RunService:
    async def on_run_finished(_ctx: RunContext, _status: RunStatus, _result: ExecutionResult) -> None:
        journal.entries.append("metrics+publish")

    store = journal.store
    return RunService(
        store.threads, store.runs, store.audit, journal.stream, on_run_finished=on_run_finished, **kwargs
    )


@pytest.mark.parametrize("fail", [False, True], ids=["finished", "failed"])
async def test_the_terminal_event_goes_on_the_stream_after_all_bookkeeping(journal: Journal, fail: bool) -> None:
    # GIVEN a chat run (it claims its thread)
    runs = service(journal)
    # WHEN it runs to its end, successfully or not
    run = await runs.run_inline(a_context("r1"), body_digest="d", new_messages=[], executor=SaysHello(fail=fail))
    # THEN ledger, release and the run-finished hook all came before the terminal event, which is last (the
    # stream's retention is the stream adapter's, set with its writes: no EXPIRE of its own)
    assert journal.entries == ["finish_run", "release_thread", "metrics+publish", "terminal"]
    assert run.status is (RunStatus.FAILED if fail else RunStatus.SUCCEEDED)


async def test_a_memory_run_also_ends_with_its_terminal_event(journal: Journal) -> None:
    # GIVEN a memory run (it only reads the thread, so there is nothing to release)
    runs = service(journal)
    await journal.store.threads.open_thread(USER, "th")
    ctx = a_context("m1", executor=ExecutorKind.MEMORY)
    await runs.run_inline(ctx, body_digest="d", new_messages=[], executor=SaysHello(), claim_thread=False)
    # THEN its bookkeeping also precedes its terminal event
    assert journal.entries == ["finish_run", "metrics+publish", "terminal"]


async def test_a_reader_of_a_settling_run_waits_for_the_real_terminal_event(journal: Journal) -> None:
    # GIVEN a run whose run-finished hook (the publish) is slow: the ledger says ended before the terminal is out
    release = asyncio.Event()

    async def slow_hook(_ctx: RunContext, _status: RunStatus, _result: ExecutionResult) -> None:
        await release.wait()

    store = journal.store
    runs = RunService(
        store.threads, store.runs, store.audit, journal.stream, on_run_finished=slow_hook, ping_interval_s=0.05
    )
    await runs.admit(a_context("r1"), body_digest="d", new_messages=[], executor=SaysHello())
    for _ in range(500):
        run = await journal.store.runs.get_run("t", "r1")
        if run is not None and run.status.is_terminal:
            break
        await asyncio.sleep(0.01)
    # WHEN a reader tails the run meanwhile
    reader = asyncio.create_task(_terminal_of(runs))
    await asyncio.sleep(0.3)
    assert not reader.done()
    release.set()
    # THEN it gets the run's own terminal event (with its stream id), not one rebuilt from the ledger
    terminal = await reader
    assert terminal.id and terminal.event["type"] == "RUN_FINISHED"
    assert "rebuiltFromLedger" not in terminal.event["metadata"]


async def _terminal_of(runs: RunService) -> Any:
    async for entry in runs.tail_run("t", "r1"):
        if entry is not None and is_terminal(entry.event):
            return entry
    raise AssertionError("no terminal event")


async def cancelled_from_another_process(
    store: InMemoryStore, stream: InMemoryEventStream, *, heartbeat_s: float, lease_s: float
) -> RunStatus | None:
    """Two processes sharing ``store`` and ``stream``: a run on A that talks until cancelled, cancelled through B.
    The run's status in the ledger once A has nothing running (within 5 s)."""
    a = RunService(store.threads, store.runs, store.audit, stream, heartbeat_s=heartbeat_s, lease_s=lease_s)
    b = RunService(store.threads, store.runs, store.audit, stream, heartbeat_s=heartbeat_s, lease_s=lease_s)
    executor = TalksUntilCancelled()
    await a.admit(a_context("r1"), body_digest="d", new_messages=[], executor=executor)
    await executor.talking.wait()
    await b.cancel(USER, "r1")
    await asyncio.wait_for(a.wait_idle(), timeout=5)
    run = await store.runs.get_run("t", "r1")
    return None if run is None else run.status


async def test_a_cancel_from_another_process_arrives_through_the_signal_without_polling_the_ledger() -> None:
    # GIVEN two processes sharing the store and the stream; a run on A whose heartbeat would take a minute
    # WHEN B cancels it
    status = await cancelled_from_another_process(InMemoryStore(), InMemoryEventStream(), heartbeat_s=60, lease_s=120)
    # THEN the run on A ends as cancelled at once (no heartbeat ran)
    assert status is RunStatus.CANCELLED


class SignalDown(InMemoryEventStream):
    """Redis answers events but not the control signal (an outage the run watches through)."""

    async def append(self, key: str, event: dict[str, Any]) -> str:
        if key == run_control_key("t", "r1"):
            raise ConnectionError("redis down")
        return await super().append(key, event)

    async def read_after(self, key: str, after_id: str, *, block_ms: int, count: int = 100) -> Any:
        if key == run_control_key("t", "r1"):
            raise ConnectionError("redis down")
        return await super().read_after(key, after_id, block_ms=block_ms, count=count)


async def test_with_the_signal_down_a_cancel_arrives_through_the_ledger_at_the_next_heartbeat() -> None:
    # WHEN B cancels while the signal cannot be sent or read
    status = await cancelled_from_another_process(InMemoryStore(), SignalDown(), heartbeat_s=0.2, lease_s=5)
    # THEN the run still ends as cancelled (the heartbeat's write returned the ledger's cancel flag)
    assert status is RunStatus.CANCELLED


async def test_a_heartbeat_is_one_store_request() -> None:
    # GIVEN a run that stays busy for several heartbeats
    store, stream = InMemoryStore(), InMemoryEventStream()
    runs = RunService(store.threads, store.runs, store.audit, stream, heartbeat_s=0.1, lease_s=5)
    executor = TalksUntilCancelled()
    await runs.admit(a_context("r1"), body_digest="d", new_messages=[], executor=executor)
    await executor.talking.wait()
    before = store.request_count
    beats_before = (await store.runs.get_run("t", "r1")).heartbeat_at  # type: ignore[union-attr]
    store.request_count = before + 1  # the get_run above
    await asyncio.sleep(0.75)
    # THEN the store saw one request per heartbeat, and no more
    during = store.request_count - before - 1
    run = await store.runs.get_run("t", "r1")
    assert run is not None and run.heartbeat_at > beats_before
    assert 4 <= during <= 8
    runs.background.cancel_local("t", "r1")
    await runs.wait_idle()


class IgnoresCancellation:
    """An executor that does not wind down by itself: a cancel simply propagates out of it."""

    step_name = "worker"

    def __init__(self) -> None:
        self.talking = asyncio.Event()

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult:
        self.talking.set()
        await asyncio.sleep(3600)
        return ExecutionResult()


async def test_a_cancel_of_an_executor_that_does_not_wind_down_still_settles_the_run_as_cancelled(
    journal: Journal,
) -> None:
    runs = service(journal)
    executor = IgnoresCancellation()
    await runs.admit(a_context("r1"), body_digest="d", new_messages=[], executor=executor)
    await executor.talking.wait()
    await runs.cancel(USER, "r1")
    await asyncio.wait_for(runs.wait_idle(), timeout=5)
    run = await journal.store.runs.get_run("t", "r1")
    assert run is not None and run.status is RunStatus.CANCELLED
    assert journal.entries[-1] == "terminal"

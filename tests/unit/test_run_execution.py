"""Execution on its own (``shared.runs.execution.BackgroundRuns``), on the in-memory adapters: a run stops itself
before its invocation's deadline and settles with ``run_deadline``; the process knows which runs it executes and
which it settled."""

from __future__ import annotations

import asyncio
import time

from ag_ui.core import TextMessageContentEvent, TextMessageEndEvent, TextMessageStartEvent

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.executors.context import RunContext
from shared.models import Run, RunStatus
from shared.run_events.emitter import RunEmitter
from shared.run_results import ExecutionResult
from shared.runs.execution import BackgroundRuns
from shared.runs.settlement import Settlement
from shared.stream_keys import run_stream_key, thread_stream_key
from tests.support.run_rigs import TalksUntilCancelled, a_context


async def started(
    store: InMemoryStore, stream: InMemoryEventStream, *, margin_s: float, left_s: float
) -> BackgroundRuns:
    await store.runs.create_run(Run(run_id="r1", thread_id="th", tenant_id="t", user_id="u", meta=a_context("r1").meta))
    settlement = Settlement(store.threads, store.runs, stream, flush_timeout_s=1.0)
    runs = BackgroundRuns(store.runs, stream, settlement, heartbeat_s=60, run_deadline_margin_s=margin_s)
    executor = TalksUntilCancelled()
    await runs.start(a_context("r1"), executor, claim_thread=False, deadline=time.time() + margin_s + left_s)
    await executor.talking.wait()
    return runs


async def test_a_run_stops_before_its_invocation_deadline_and_ends_with_run_deadline() -> None:
    store, stream = InMemoryStore(), InMemoryEventStream()
    # GIVEN a run whose invocation ends 0.2 s after its margin
    runs = await started(store, stream, margin_s=20.0, left_s=0.2)
    assert runs.is_running("t", "r1")
    # WHEN it reaches that point
    await asyncio.wait_for(runs.wait_idle(), timeout=5)
    # THEN it failed with run_deadline, on the ledger and as its terminal event, and this process knows it settled
    run = await store.runs.get_run("t", "r1")
    assert run is not None and run.status is RunStatus.FAILED and run.error_code == "run_deadline"
    entries = await stream.read_after(thread_stream_key("t", "th"), "0-0", block_ms=0, count=100)
    assert entries[-1].event["type"] == "RUN_ERROR" and entries[-1].event["code"] == "run_deadline"
    assert not runs.is_running("t", "r1") and runs.settled_here("t", "r1")


async def test_a_local_cancel_settles_the_run_as_cancelled() -> None:
    store, stream = InMemoryStore(), InMemoryEventStream()
    runs = await started(store, stream, margin_s=20.0, left_s=600.0)
    # WHEN this process cancels it
    runs.cancel_local("t", "r1")
    await asyncio.wait_for(runs.wait_settled("t", "r1"), timeout=5)
    # THEN it ended as cancelled, with RUN_FINISHED outcome cancelled last on its stream
    run = await store.runs.get_run("t", "r1")
    assert run is not None and run.status is RunStatus.CANCELLED
    entries = await stream.read_after(thread_stream_key("t", "th"), "0-0", block_ms=0, count=100)
    assert entries[-1].event["type"] == "RUN_FINISHED" and entries[-1].event["outcome"] == {"type": "cancelled"}


class SlowStream(InMemoryEventStream):
    """Each write takes a while, as a Redis round trip under load does: writes can overlap."""

    async def append_batch(self, entries, *, clear=None, encoded=None):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.02)
        return await super().append_batch(entries, clear=clear, encoded=encoded)


class SpeaksAtOnce:
    """An executor whose first event is emitted before RUN_STARTED's write has come back."""

    step_name = "worker"

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult:
        await emitter.emit(TextMessageStartEvent(message_id="m1", role="assistant"))
        await emitter.emit(TextMessageContentEvent(message_id="m1", delta="hi"))
        await emitter.emit(TextMessageEndEvent(message_id="m1"))
        return ExecutionResult()


async def test_the_executor_starts_beside_run_started_and_every_event_is_written_once_in_order() -> None:
    # GIVEN a slow stream, and an executor that emits as soon as it starts (it starts before RUN_STARTED's write
    # returns, so its writes would overlap that one)
    store, stream = InMemoryStore(), SlowStream()
    await store.runs.create_run(Run(run_id="r1", thread_id="th", tenant_id="t", user_id="u", meta=a_context("r1").meta))
    settlement = Settlement(store.threads, store.runs, stream, flush_timeout_s=1.0)
    runs = BackgroundRuns(store.runs, stream, settlement, heartbeat_s=60)
    # WHEN the run starts and ends
    await runs.start(a_context("r1"), SpeaksAtOnce(), claim_thread=False, deadline=time.time() + 60)
    await runs.wait_idle()
    # THEN its stream holds each event once, RUN_STARTED first and the terminal event last
    entries = await stream.read_after(thread_stream_key("t", "th"), "0-0", block_ms=0)
    kinds = [e.event["type"] for e in entries]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert kinds.count("TEXT_MESSAGE_CONTENT") == 1 and kinds.count("RUN_STARTED") == 1
    assert kinds.index("TEXT_MESSAGE_START") < kinds.index("TEXT_MESSAGE_CONTENT") < kinds.index("TEXT_MESSAGE_END")
    # and nothing went to a stream of the run's own: the thread's stream is a visible run's only copy
    assert await stream.read_after(run_stream_key("t", "r1"), "0-0", block_ms=0) == []

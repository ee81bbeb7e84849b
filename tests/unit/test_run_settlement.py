"""How a run ends (``shared.runs.settlement``), on the in-memory adapters: a failure's code and the usage before it,
what a failed run left open closed before its RUN_ERROR, and a terminal event that goes out even when the
run-finished hook hangs."""

from __future__ import annotations

import asyncio

from ag_ui.core import StepStartedEvent, ToolCallStartEvent

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.errors import ModelError
from shared.executors.context import RunContext
from shared.models import ExecutionMeta, ExecutorKind, Identity, Origin, RunStatus, Usage
from shared.profiles import default_catalog
from shared.run_events.emitter import RunEmitter
from shared.run_results import ExecutionFailed, ExecutionResult
from shared.runs.service import RunService
from shared.runs.settlement import Settlement, finished
from shared.stream_keys import run_stream_key

USER = Identity(tenant_id="t", user_id="u")
USAGE = Usage(provider="scripted", model="m", input_tokens=7, output_tokens=3)


def a_context(run_id: str = "r1") -> RunContext:
    meta = ExecutionMeta(origin=Origin.CHAT, executor=ExecutorKind.WORKER)
    profile = default_catalog().get("chat_default")
    return RunContext(identity=USER, thread_id="th", run_id=run_id, profile=profile, meta=meta)


async def events(stream: InMemoryEventStream, run_id: str = "r1") -> list[dict[str, object]]:
    return [e.event for e in await stream.read_after(run_stream_key("t", run_id), "0-0", block_ms=0, count=1000)]


async def test_a_failure_after_some_turns_keeps_its_code_and_the_usage_before_it() -> None:
    store, stream = InMemoryStore(), InMemoryEventStream()
    settlement = Settlement(store.threads, store.runs, stream, flush_timeout_s=1.0)
    emitter = RunEmitter(stream, run_stream_key("t", "r1"))
    # WHEN an executor fails with a rate limit after one model turn
    failure = ExecutionFailed(ModelError("busy", code="model_rate_limited"), [USAGE])
    outcome = await settlement.failed(a_context(), emitter, failure)
    # THEN the outcome carries the cause's documented code and that turn's usage, on the ledger and the event
    assert outcome.status is RunStatus.FAILED and outcome.error_code == "model_rate_limited"
    assert outcome.result is not None and outcome.result.usage == [USAGE]
    terminal = outcome.terminal.model_dump(by_alias=True, exclude_none=True)  # type: ignore[union-attr]
    assert terminal["code"] == "model_rate_limited" and terminal["usage"][0]["inputTokens"] == 7


async def test_a_failed_run_closes_its_open_tool_call_and_step_before_its_run_error() -> None:
    store, stream = InMemoryStore(), InMemoryEventStream()
    settlement = Settlement(store.threads, store.runs, stream, flush_timeout_s=1.0)
    emitter = RunEmitter(stream, run_stream_key("t", "r1"))
    await emitter.emit(StepStartedEvent(step_name="worker"))
    await emitter.emit(ToolCallStartEvent(tool_call_id="c1", tool_call_name="search", parent_message_id="a1"))
    # WHEN the run fails with the call unanswered and the step open
    await settlement.failed(a_context(), emitter, RuntimeError("boom"))
    # THEN the call got a (synthetic) result and the step was closed, in that order
    kinds = [e["type"] for e in await events(stream)]
    assert kinds == ["STEP_STARTED", "TOOL_CALL_START", "TOOL_CALL_RESULT", "STEP_FINISHED"]
    assert emitter.unanswered_calls == {}


async def test_the_terminal_event_goes_out_even_when_the_run_finished_hook_hangs() -> None:
    store, stream = InMemoryStore(), InMemoryEventStream()

    async def hangs(_ctx: RunContext, _status: RunStatus, _result: ExecutionResult) -> None:
        await asyncio.sleep(3600)

    settlement = Settlement(
        store.threads, store.runs, stream, flush_timeout_s=1.0, after_run_timeout_s=0.05, on_run_finished=hangs
    )
    emitter = RunEmitter(stream, run_stream_key("t", "r1"))
    # WHEN a finished run settles
    await asyncio.wait_for(settlement.settle(a_context(), emitter, False, finished(a_context(), ExecutionResult())), 5)
    # THEN its terminal event is on the stream, last
    assert [e["type"] for e in await events(stream)][-1] == "RUN_FINISHED"


class FailsAfterATurn:
    step_name = "worker"

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult:
        raise ExecutionFailed(ModelError("cut", code="model_stream_interrupted"), [USAGE])


async def test_the_ledger_records_the_usage_of_a_failed_run() -> None:
    # GIVEN a run whose executor fails after one model turn
    store = InMemoryStore()
    runs = RunService(store.threads, store.runs, store.audit, InMemoryEventStream())
    # WHEN it runs to its end
    run = await runs.run_inline(a_context(), body_digest="d", new_messages=[], executor=FailsAfterATurn())
    # THEN the ledger says failed, with the cause's code and the turn's tokens
    assert run.status is RunStatus.FAILED and run.error_code == "model_stream_interrupted"
    assert [(u.input_tokens, u.output_tokens) for u in run.usage] == [(7, 3)]

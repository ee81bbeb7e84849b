"""Executors that behave in known ways (one that says hello, one that talks until cancelled) and the run context they
run under, for the run service's unit tests and the integration tests that run it on a real stream."""

from __future__ import annotations

import asyncio

from ag_ui.core import TextMessageContentEvent, TextMessageEndEvent, TextMessageStartEvent

from shared.executors.context import RunContext
from shared.executors.worker import ExecutionResult
from shared.models import ExecutionMeta, ExecutorKind, Identity, Origin
from shared.profiles import default_catalog
from shared.run_events.emitter import RunEmitter

USER = Identity(tenant_id="t", user_id="u")


def a_context(run_id: str, thread_id: str = "th", executor: ExecutorKind = ExecutorKind.WORKER) -> RunContext:
    meta = ExecutionMeta(origin=Origin.CHAT, executor=executor, hidden_from_user=executor is ExecutorKind.MEMORY)
    return RunContext(
        identity=USER, thread_id=thread_id, run_id=run_id, profile=default_catalog().get("chat_default"), meta=meta
    )


class SaysHello:
    step_name = "worker"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult:
        await emitter.emit(TextMessageStartEvent(message_id="m1", role="assistant"))
        await emitter.emit(TextMessageContentEvent(message_id="m1", delta="hello"))
        await emitter.emit(TextMessageEndEvent(message_id="m1"))
        if self.fail:
            raise RuntimeError("boom")
        return ExecutionResult()


class TalksUntilCancelled:
    step_name = "worker"

    def __init__(self) -> None:
        self.talking = asyncio.Event()

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult:
        result = ExecutionResult()
        try:
            self.talking.set()
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            result.cancelled = True
        return result

"""Run admission and background execution.

The executor never writes to a socket: it appends events to the run's stream and the stored thread, and every
HTTP response (the POST that started the run, a retry of it, a resume) tails that stream. A client that goes away
therefore never stops a run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from ag_ui.core import RunErrorEvent, RunFinishedEvent, RunStartedEvent, TokenUsage

from shared.adapters.redis_stream import run_stream_key, thread_stream_key
from shared.errors import AgentError, Conflict, NotFound
from shared.executors.context import RunContext
from shared.executors.worker import ExecutionResult
from shared.models import Identity, Message, Run, RunStatus, Usage, merge_usage, utc_now
from shared.ports import ConversationStore, EventStream, RunLedger, StreamEntry
from shared.runs.emitter import RunEmitter, is_terminal

logger = logging.getLogger(__name__)

RUN_STREAM_TTL_S = 24 * 3600
STALE_RUN_AFTER = timedelta(minutes=15)


class Executor(Protocol):
    step_name: str

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult: ...


class RunStore(ConversationStore, RunLedger, Protocol):
    async def claim_thread(self, identity: Identity, thread_id: str, run_id: str, *, stale_before: Any) -> bool: ...

    async def release_thread(self, tenant_id: str, thread_id: str, run_id: str) -> None: ...

    async def request_cancel(self, tenant_id: str, run_id: str) -> None: ...


RunFinishedHook = Callable[[RunContext, RunStatus, ExecutionResult], Awaitable[None]]


@dataclass(frozen=True)
class Admission:
    run: Run
    created: bool
    stream_key: str


def usage_to_agui(usage: Sequence[Usage]) -> list[TokenUsage]:
    out: list[TokenUsage] = []
    for u in merge_usage(list(usage)):
        fields: dict[str, Any] = {
            "provider": u.provider,
            "model": u.model,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "total_tokens": u.input_tokens + u.output_tokens,
        }
        if u.reasoning_tokens:
            fields["reasoning_tokens"] = u.reasoning_tokens
        if u.cached_input_tokens:
            fields["cached_input_tokens"] = u.cached_input_tokens
        out.append(TokenUsage(**fields))
    return out


class RunService:
    def __init__(
        self,
        store: RunStore,
        stream: EventStream,
        *,
        ping_interval_s: float = 15.0,
        heartbeat_s: float = 2.0,
        on_run_finished: RunFinishedHook | None = None,
    ) -> None:
        self._store = store
        self._stream = stream
        self._ping_interval_s = ping_interval_s
        self._heartbeat_s = heartbeat_s
        self.on_run_finished = on_run_finished
        self._tasks: set[asyncio.Task[None]] = set()
        self._by_run: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._inner: dict[tuple[str, str], asyncio.Task[ExecutionResult]] = {}

    async def admit(
        self,
        ctx: RunContext,
        *,
        body_digest: str,
        new_messages: Sequence[Message],
        executor: Executor,
        claim_thread: bool = True,
    ) -> Admission:
        """Store the run and the caller's new messages, then start the executor in the background.

        The same ``runId`` with the same body attaches to the existing run; with another body it is a conflict.
        ``claim_thread`` makes the run exclusive on its thread (chat and automation runs); memory runs only read
        the thread and never make it busy.
        """
        identity = ctx.identity
        key = run_stream_key(identity.tenant_id, ctx.run_id)
        existing = await self._store.get_run(identity.tenant_id, ctx.run_id)
        if existing is not None:
            return self._attach(existing, identity, ctx.thread_id, body_digest, key)
        await self._store.open_thread(identity, ctx.thread_id)
        if claim_thread and not await self._store.claim_thread(
            identity, ctx.thread_id, ctx.run_id, stale_before=utc_now() - STALE_RUN_AFTER
        ):
            raise Conflict("another run is active on this thread", code="thread_busy")
        run = Run(
            run_id=ctx.run_id,
            thread_id=ctx.thread_id,
            tenant_id=identity.tenant_id,
            user_id=identity.user_id,
            meta=ctx.meta,
            body_digest=body_digest,
        )
        stored_run, created = await self._store.create_run(run)
        if not created:
            return self._attach(stored_run, identity, ctx.thread_id, body_digest, key)
        try:
            known = await self._store.known_message_ids(identity.tenant_id, ctx.thread_id, [m.id for m in new_messages])
            fresh = [m for m in new_messages if m.id not in known]
            if fresh:
                await self._store.append_messages(identity, ctx.thread_id, fresh)
        except BaseException:
            await self._store.finish_run(
                identity.tenant_id,
                ctx.run_id,
                status=RunStatus.FAILED.value,
                usage=[],
                last_stream_id=None,
                error_code="admission_failed",
            )
            if claim_thread:
                await self._store.release_thread(identity.tenant_id, ctx.thread_id, ctx.run_id)
            raise
        task = asyncio.create_task(self._execute(ctx, executor, key, claim_thread), name=f"run:{ctx.run_id}")
        self._tasks.add(task)
        self._by_run[(identity.tenant_id, ctx.run_id)] = task
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _t: self._by_run.pop((identity.tenant_id, ctx.run_id), None))
        return Admission(run=stored_run, created=True, stream_key=key)

    async def run_inline(
        self,
        ctx: RunContext,
        *,
        body_digest: str,
        new_messages: Sequence[Message],
        executor: Executor,
        claim_thread: bool = True,
    ) -> Run:
        """Admit a run and wait for it to end (Lambda handlers without a client to stream to)."""
        admission = await self.admit(
            ctx, body_digest=body_digest, new_messages=new_messages, executor=executor, claim_thread=claim_thread
        )
        task = self._by_run.get((ctx.identity.tenant_id, ctx.run_id))
        if task is not None:
            await task
        run = await self._store.get_run(ctx.identity.tenant_id, ctx.run_id)
        return run or admission.run

    def _attach(self, run: Run, identity: Identity, thread_id: str, body_digest: str, key: str) -> Admission:
        if run.user_id != identity.user_id:
            raise NotFound("run not found")
        if run.thread_id != thread_id or run.body_digest != body_digest:
            raise Conflict("runId already used with a different body", code="run_id_conflict")
        return Admission(run=run, created=False, stream_key=key)

    async def get_visible_run(self, identity: Identity, run_id: str, *, include_hidden: bool = False) -> Run:
        """The caller's run; NotFound for someone else's, and for hidden runs unless ``include_hidden``."""
        run = await self._store.get_run(identity.tenant_id, run_id)
        if run is None or run.user_id != identity.user_id:
            raise NotFound("run not found")
        if run.meta.hidden_from_user and not include_hidden:
            raise NotFound("run not found")
        return run

    async def cancel(self, identity: Identity, run_id: str) -> Run:
        """Ask a run to stop. Works across processes: the executing process polls the flag with its heartbeat."""
        run = await self.get_visible_run(identity, run_id)
        if run.status.is_terminal:
            return run
        await self._store.request_cancel(identity.tenant_id, run_id)
        task = self._by_run.get((identity.tenant_id, run_id))
        if task is not None:
            self._cancel_local(identity.tenant_id, run_id)
        return run.model_copy(update={"cancel_requested": True})

    def _cancel_local(self, tenant_id: str, run_id: str) -> None:
        inner = self._inner.get((tenant_id, run_id))
        if inner is not None and not inner.done():
            inner.cancel()

    async def _watch(self, ctx: RunContext, emitter: RunEmitter) -> None:
        """Heartbeat the run and pick up a cancel requested from any process."""
        tenant = ctx.identity.tenant_id
        while True:
            await asyncio.sleep(self._heartbeat_s)
            try:
                await self._store.heartbeat(tenant, ctx.run_id, last_stream_id=emitter.last_id)
                run = await self._store.get_run(tenant, ctx.run_id)
            except Exception:
                logger.warning("heartbeat failed", extra={"run_id": ctx.run_id}, exc_info=True)
                continue
            if run is not None and run.cancel_requested:
                self._cancel_local(tenant, ctx.run_id)
                return

    async def _execute(self, ctx: RunContext, executor: Executor, key: str, claim_thread: bool) -> None:
        thread_key = thread_stream_key(ctx.identity.tenant_id, ctx.thread_id)
        emitter = RunEmitter(
            self._stream,
            key,
            thread_key=thread_key,
            run_id=ctx.run_id,
            hidden=ctx.meta.hidden_from_user,
        )
        tenant = ctx.identity.tenant_id
        started = time.monotonic()
        result: ExecutionResult | None = None
        status = RunStatus.FAILED
        error_code: str | None = None
        watcher = asyncio.create_task(self._watch(ctx, emitter))
        try:
            await emitter.emit(
                RunStartedEvent(
                    thread_id=ctx.thread_id,
                    run_id=ctx.run_id,
                    metadata={
                        "origin": ctx.meta.origin.value,
                        "executor": ctx.meta.executor.value,
                        "executionProfileName": ctx.meta.execution_profile_name,
                        "hiddenFromUser": ctx.meta.hidden_from_user,
                    },
                )
            )
            inner = asyncio.create_task(executor.execute(ctx, emitter))
            self._inner[(tenant, ctx.run_id)] = inner
            try:
                result = await inner
            finally:
                self._inner.pop((tenant, ctx.run_id), None)
            cancelled = result.cancelled
            await emitter.emit(
                RunFinishedEvent(
                    thread_id=ctx.thread_id,
                    run_id=ctx.run_id,
                    outcome={"type": "cancelled" if cancelled else "success"},
                    usage=usage_to_agui(result.usage),
                )
            )
            status = RunStatus.CANCELLED if cancelled else RunStatus.SUCCEEDED
        except Exception as exc:
            error_code = exc.code if isinstance(exc, AgentError) else "run_failed"
            message = exc.message if isinstance(exc, AgentError) else "the run failed"
            partial_usage = getattr(exc, "usage_so_far", None) or (result.usage if result else [])
            logger.exception("run failed", extra={"run_id": ctx.run_id, "thread_id": ctx.thread_id, "code": error_code})
            if not emitter.terminal_sent:
                try:
                    await emitter.emit(
                        RunErrorEvent(message=message, code=error_code, usage=usage_to_agui(partial_usage))
                    )
                except Exception:
                    logger.exception("could not write RUN_ERROR", extra={"run_id": ctx.run_id})
            result = result or ExecutionResult(usage=list(partial_usage))
        finally:
            watcher.cancel()
            try:
                await self._store.finish_run(
                    tenant,
                    ctx.run_id,
                    status=status.value,
                    usage=merge_usage(result.usage) if result else [],
                    last_stream_id=emitter.last_id,
                    error_code=error_code,
                )
                if claim_thread:
                    await self._store.release_thread(tenant, ctx.thread_id, ctx.run_id)
                await self._stream.expire(key, RUN_STREAM_TTL_S)
            except Exception:
                logger.exception("could not finalise run", extra={"run_id": ctx.run_id})
            logger.info(
                "run finished",
                extra={
                    "run_id": ctx.run_id,
                    "thread_id": ctx.thread_id,
                    "tenant_id": tenant,
                    "profile": ctx.profile.name,
                    "executor": ctx.meta.executor.value,
                    "status": status.value,
                    "duration_ms": round((time.monotonic() - started) * 1000),
                },
            )
            if self.on_run_finished is not None and result is not None:
                try:
                    await self.on_run_finished(ctx, status, result)
                except Exception:
                    logger.exception("run-finished hook failed", extra={"run_id": ctx.run_id})

    async def tail(
        self, key: str, *, after: str = "0-0", until_terminal: bool = True
    ) -> AsyncIterator[StreamEntry | None]:
        """Entries after ``after``; ``None`` marks a silent stretch (send a ping). A run's tail ends after the
        terminal event; a thread's tail (``until_terminal=False``) goes on until the client leaves."""
        cursor = after
        block_ms = int(self._ping_interval_s * 1000)
        while True:
            entries = await self._stream.read_after(key, cursor, block_ms=block_ms)
            if not entries:
                yield None
                continue
            for entry in entries:
                cursor = entry.id
                yield entry
                if until_terminal and is_terminal(entry.event):
                    return

    async def wait_idle(self) -> None:
        """Wait for every background run of this process (tests and graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    @property
    def active_runs(self) -> int:
        return len(self._tasks)

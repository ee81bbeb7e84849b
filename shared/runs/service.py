"""Run admission and background execution.

The executor never writes to a socket: it appends events to the run's stream and the stored thread, and every
HTTP response (the POST that started the run, a retry of it, a resume) tails that stream. A client that goes away
therefore never stops a run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from ag_ui.core import RunErrorEvent, RunFinishedEvent, RunStartedEvent, TokenUsage

from shared.adapters.redis_stream import run_stream_key
from shared.errors import AgentError, Conflict, ModelError, NotFound
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
    def __init__(self, store: RunStore, stream: EventStream, *, ping_interval_s: float = 15.0) -> None:
        self._store = store
        self._stream = stream
        self._ping_interval_s = ping_interval_s
        self._tasks: set[asyncio.Task[None]] = set()

    async def admit(
        self,
        ctx: RunContext,
        *,
        body_digest: str,
        new_messages: Sequence[Message],
        executor: Executor,
    ) -> Admission:
        """Store the run and the caller's new messages, then start the executor in the background.

        The same ``runId`` with the same body attaches to the existing run; with another body it is a conflict.
        """
        identity = ctx.identity
        key = run_stream_key(identity.tenant_id, ctx.run_id)
        existing = await self._store.get_run(identity.tenant_id, ctx.run_id)
        if existing is not None:
            return self._attach(existing, identity, ctx.thread_id, body_digest, key)
        await self._store.open_thread(identity, ctx.thread_id)
        if not await self._store.claim_thread(
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
            await self._store.release_thread(identity.tenant_id, ctx.thread_id, ctx.run_id)
            raise
        task = asyncio.create_task(self._execute(ctx, executor, key), name=f"run:{ctx.run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return Admission(run=stored_run, created=True, stream_key=key)

    def _attach(self, run: Run, identity: Identity, thread_id: str, body_digest: str, key: str) -> Admission:
        if run.user_id != identity.user_id:
            raise NotFound("run not found")
        if run.thread_id != thread_id or run.body_digest != body_digest:
            raise Conflict("runId already used with a different body", code="run_id_conflict")
        return Admission(run=run, created=False, stream_key=key)

    async def _execute(self, ctx: RunContext, executor: Executor, key: str) -> None:
        emitter = RunEmitter(self._stream, key)
        tenant = ctx.identity.tenant_id
        started = time.monotonic()
        result: ExecutionResult | None = None
        status = RunStatus.FAILED
        error_code: str | None = None
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
            result = await executor.execute(ctx, emitter)
            await emitter.emit(
                RunFinishedEvent(
                    thread_id=ctx.thread_id,
                    run_id=ctx.run_id,
                    outcome={"type": "success"},
                    usage=usage_to_agui(result.usage),
                )
            )
            status = RunStatus.SUCCEEDED
        except Exception as exc:
            error_code = exc.code if isinstance(exc, AgentError) else "run_failed"
            message = exc.message if isinstance(exc, ModelError | AgentError) else "the run failed"
            logger.exception("run failed", extra={"run_id": ctx.run_id, "thread_id": ctx.thread_id, "code": error_code})
            if not emitter.terminal_sent:
                try:
                    await emitter.emit(
                        RunErrorEvent(
                            message=message, code=error_code, usage=usage_to_agui(result.usage if result else [])
                        )
                    )
                except Exception:
                    logger.exception("could not write RUN_ERROR", extra={"run_id": ctx.run_id})
        finally:
            try:
                await self._store.finish_run(
                    tenant,
                    ctx.run_id,
                    status=status.value,
                    usage=merge_usage(result.usage) if result else [],
                    last_stream_id=emitter.last_id,
                    error_code=error_code,
                )
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
                    "status": status.value,
                    "duration_ms": round((time.monotonic() - started) * 1000),
                },
            )

    async def tail(self, key: str, *, after: str = "0-0") -> AsyncIterator[StreamEntry | None]:
        """Entries after ``after`` until the terminal event; ``None`` marks a silent stretch (send a ping)."""
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
                if is_terminal(entry.event):
                    return

    async def wait_idle(self) -> None:
        """Wait for every background run of this process (tests and graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    @property
    def active_runs(self) -> int:
        return len(self._tasks)

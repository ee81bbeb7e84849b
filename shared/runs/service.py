"""Run admission and background execution.

The executor never writes to a socket: it appends events to the run's stream and the stored thread, and every
HTTP response (the POST that started the run, a retry of it, a resume) tails that stream. A client that goes away
therefore never stops a run.

Faults (docs/reliability.md): admission refuses with ``503 service_unavailable`` when the event stream or the
store cannot take a run, before the run exists, so a retry of the same request starts it cleanly. Once admitted,
the store (DynamoDB) is the record and the stream (Redis) only delivers: a stream outage delays events (the
emitter buffers them in order), a reader that cannot reach the stream for ``stream_outage_grace_s`` gets a
terminal ``RUN_ERROR`` ``stream_unavailable``, and a reader of a run that ended without a terminal event on its
stream gets one rebuilt from the run ledger.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from ag_ui.core import (
    RunErrorEvent,
    RunFinishedEvent,
    StepFinishedEvent,
    TokenUsage,
)

from shared.errors import AgentError, Conflict, ModelError, NotFound, ServiceUnavailable
from shared.executors.context import RunContext
from shared.executors.tool_results import emit_result, synthetic_error, tool_message
from shared.executors.worker import ExecutionResult
from shared.models import Identity, Message, Run, RunStatus, Usage, merge_usage, utc_now
from shared.ports import ConversationStore, EventStream, RunLedger, StreamEntry
from shared.runs.emitter import RunEmitter, is_terminal, run_started
from shared.stream_keys import run_stream_key, thread_stream_key

logger = logging.getLogger(__name__)

RUN_STREAM_TTL_S = 24 * 3600
STALE_RUN_AFTER = timedelta(minutes=15)

# The RUN_ERROR codes of docs/protocols/agent/errors.md §3, each with the sentence a person sees. Provider messages
# are never passed on (they may carry internals); any other failure is ``run_failed``.
RUN_ERROR_MESSAGES: dict[str, str] = {
    "model_rate_limited": "The model provider is rate-limiting requests; try again shortly.",
    "model_unavailable": "The model provider is unavailable; try again shortly.",
    "model_timeout": "The model did not answer in time.",
    "model_stream_interrupted": "The model's answer broke off.",
    "model_bad_request": "The model provider rejected the request.",
    "run_failed": "The run failed.",
}
STREAM_UNAVAILABLE = "stream_unavailable"
STREAM_UNAVAILABLE_MESSAGE = (
    "The live event stream is unavailable. The run goes on and is saved: read the thread history, or resume "
    "this run's events later."
)


@runtime_checkable
class ProbedStream(Protocol):
    """An event stream that can say whether it is reachable (Redis ``PING``)."""

    async def ping(self) -> bool: ...


class Executor(Protocol):
    step_name: str

    async def execute(self, ctx: RunContext, emitter: RunEmitter) -> ExecutionResult: ...


class RunStore(ConversationStore, RunLedger, Protocol):
    async def claim_thread(self, identity: Identity, thread_id: str, run_id: str, *, stale_before: Any) -> bool: ...

    async def release_thread(self, tenant_id: str, thread_id: str, run_id: str) -> None: ...

    async def request_cancel(self, tenant_id: str, run_id: str) -> None: ...


def run_error_of(exc: BaseException) -> tuple[str, str]:
    """The documented ``RUN_ERROR`` code and message for a failure."""
    code = exc.code if isinstance(exc, AgentError) else "run_failed"
    if code not in RUN_ERROR_MESSAGES or (code.startswith("model_") and not isinstance(exc, ModelError)):
        code = "run_failed"
    return code, RUN_ERROR_MESSAGES[code]


def terminal_from_ledger(run: Run) -> dict[str, Any]:
    """The terminal event of an ended run, rebuilt from its ledger record (for a stream that lacks one).

    ``metadata.rebuiltFromLedger`` tells a client that events before it may be missing from this stream: the
    run's messages are complete in the thread history.
    """
    usage = [u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in usage_to_agui(run.usage)]
    metadata = {"rebuiltFromLedger": True}
    if run.status is RunStatus.FAILED:
        code = run.error_code if run.error_code in RUN_ERROR_MESSAGES else "run_failed"
        return {
            "type": "RUN_ERROR",
            "message": RUN_ERROR_MESSAGES[code],
            "code": code,
            "usage": usage,
            "metadata": metadata,
        }
    outcome = "cancelled" if run.status is RunStatus.CANCELLED else "success"
    return {
        "type": "RUN_FINISHED",
        "threadId": run.thread_id,
        "runId": run.run_id,
        "outcome": {"type": outcome},
        "usage": usage,
        "metadata": metadata,
    }


def synthetic_entry(event: dict[str, Any]) -> StreamEntry:
    """An event that is not on the stream: its id is empty, and it is framed without an ``id:`` line."""
    return StreamEntry(id="", event={**event, "timestamp": int(time.time() * 1000)})


RunFinishedHook = Callable[[RunContext, RunStatus, ExecutionResult], Awaitable[None]]
SettleMessages = Callable[[list[Message]], Awaitable[list[Message]]]


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
        stream_outage_grace_s: float = 5.0,
        flush_timeout_s: float = 10.0,
    ) -> None:
        self._store = store
        self._stream = stream
        self._ping_interval_s = ping_interval_s
        self._heartbeat_s = heartbeat_s
        self._stream_outage_grace_s = stream_outage_grace_s
        self._flush_timeout_s = flush_timeout_s
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
        settle: SettleMessages | None = None,
    ) -> Admission:
        """Store the run and the caller's new messages, then start the executor in the background.

        The same ``runId`` with the same body attaches to the existing run; with another body it is a conflict.
        ``claim_thread`` makes the run exclusive on its thread (chat and automation runs); memory runs only read
        the thread and never make it busy. ``settle`` sees the new messages once the thread is claimed, and
        returns the ones to store (front-end tool results checked against the pending calls, repairs added); an
        ``AgentError`` it raises refuses the run with nothing stored.
        """
        identity = ctx.identity
        key = run_stream_key(identity.tenant_id, ctx.run_id)
        await self._probe_stream()
        claimed = False
        try:
            existing = await self._store.get_run(identity.tenant_id, ctx.run_id)
            if existing is not None:
                return self._attach(existing, identity, ctx.thread_id, body_digest, key)
            await self._store.open_thread(identity, ctx.thread_id)
            if claim_thread:
                claimed = await self._store.claim_thread(
                    identity, ctx.thread_id, ctx.run_id, stale_before=utc_now() - STALE_RUN_AFTER
                )
                if not claimed:
                    raise Conflict("another run is active on this thread", code="thread_busy")
            # The caller's messages first, the run record last: a failure in between leaves no run behind, so a
            # retry of the same request is admitted afresh, and the messages already stored are not stored twice.
            known = await self._store.known_message_ids(identity.tenant_id, ctx.thread_id, [m.id for m in new_messages])
            fresh = [m for m in new_messages if m.id not in known]
            if settle is not None:
                fresh = await settle(fresh)
            if fresh:
                await self._store.append_messages(identity, ctx.thread_id, fresh)
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
        except AgentError:
            if claimed:
                await self._release_unless_run_exists(identity, ctx)
            raise
        except Exception as exc:
            logger.exception("admission failed", extra={"run_id": ctx.run_id, "thread_id": ctx.thread_id})
            if claimed:
                await self._release_unless_run_exists(identity, ctx)
            raise ServiceUnavailable(
                "the run could not be stored; retry the same request", code="service_unavailable"
            ) from exc
        # The run is new, so anything already under its stream key is stale (a ledger restored from a backup, an
        # expired run record): drop it so no reader of this run ever replays another run's events.
        try:
            await self._stream.expire(key, 0)
        except Exception:
            logger.warning("could not clear a stale run stream", extra={"run_id": ctx.run_id}, exc_info=True)
        task = asyncio.create_task(self._execute(ctx, executor, key, claim_thread), name=f"run:{ctx.run_id}")
        self._tasks.add(task)
        self._by_run[(identity.tenant_id, ctx.run_id)] = task
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _t: self._by_run.pop((identity.tenant_id, ctx.run_id), None))
        return Admission(run=stored_run, created=True, stream_key=key)

    async def _probe_stream(self) -> None:
        """Refuse before anything is stored when the event stream is down: nobody could follow the run."""
        if not isinstance(self._stream, ProbedStream):
            return
        try:
            reachable = await self._stream.ping()
        except Exception:
            logger.warning("event stream unreachable at admission", exc_info=True)
            reachable = False
        if not reachable:
            raise ServiceUnavailable("the event stream is unavailable; retry shortly", code="service_unavailable")

    async def _release_unless_run_exists(self, identity: Identity, ctx: RunContext) -> None:
        """Give the thread back after a failed admission, unless a concurrent admission of the same run won."""
        try:
            if await self._store.get_run(identity.tenant_id, ctx.run_id) is None:
                await self._store.release_thread(identity.tenant_id, ctx.thread_id, ctx.run_id)
        except Exception:
            # The claim goes stale by itself (STALE_RUN_AFTER); nothing else to do here.
            logger.warning("could not release the thread after a failed admission", extra={"run_id": ctx.run_id})

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
            await emitter.emit(run_started(ctx.thread_id, ctx.run_id, ctx.meta))
            inner = asyncio.create_task(executor.execute(ctx, emitter))
            self._inner[(tenant, ctx.run_id)] = inner
            try:
                result = await inner
            finally:
                self._inner.pop((tenant, ctx.run_id), None)
            cancelled = result.cancelled
            outcome: dict[str, Any] = {"type": "cancelled" if cancelled else "success"}
            if result.pending_tool_call_ids and not cancelled:
                # Front-end tool calls handed to the client (AG-UI's success outcome names them).
                outcome["pendingToolCallIds"] = list(result.pending_tool_call_ids)
            await emitter.emit(
                RunFinishedEvent(
                    thread_id=ctx.thread_id,
                    run_id=ctx.run_id,
                    outcome=outcome,
                    usage=usage_to_agui(result.usage),
                )
            )
            status = RunStatus.CANCELLED if cancelled else RunStatus.SUCCEEDED
        except Exception as exc:
            error_code, message = run_error_of(exc)
            partial_usage = getattr(exc, "usage_so_far", None) or (result.usage if result else [])
            logger.exception(
                "run failed",
                extra={"run_id": ctx.run_id, "thread_id": ctx.thread_id, "code": error_code, "cause": _cause(exc)},
            )
            if not emitter.terminal_sent:
                try:
                    await self._answer_open_calls(ctx, emitter)
                    if emitter.open_step is not None:
                        # sse-events.md §2 rule 4: the step is closed before the terminal event, failure or not.
                        await emitter.emit(StepFinishedEvent(step_name=emitter.open_step))
                    await emitter.emit(
                        RunErrorEvent(message=message, code=error_code, usage=usage_to_agui(partial_usage))
                    )
                except Exception:
                    logger.exception("could not write RUN_ERROR", extra={"run_id": ctx.run_id})
            result = result or ExecutionResult(usage=list(partial_usage))
        finally:
            watcher.cancel()
            await self._finalise(ctx, emitter, key, claim_thread, status, result, error_code)
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
                    "stream_failures": emitter.stream_failures,
                },
            )
            if self.on_run_finished is not None and result is not None:
                try:
                    await self.on_run_finished(ctx, status, result)
                except Exception:
                    logger.exception("run-finished hook failed", extra={"run_id": ctx.run_id})

    async def _answer_open_calls(self, ctx: RunContext, emitter: RunEmitter) -> None:
        """The last guard of sse-events.md §2 rule 4: every tool call on the stream gets a result.

        The executor's own salvage normally answers its calls; this covers the calls it could not (for example when
        storing the turn that made them failed). A result is stored only when the call is stored, so the thread
        never gains an orphan; otherwise it only closes the call on the wire.
        """
        if not emitter.unanswered_calls:
            return
        tenant = ctx.identity.tenant_id
        parents = sorted(set(emitter.unanswered_calls.values()))
        try:
            stored = await self._store.known_message_ids(tenant, ctx.thread_id, parents)
        except Exception:
            stored = set()
        content = synthetic_error("run_failed", "the run failed before this tool ran")
        for call_id, parent in list(emitter.unanswered_calls.items()):
            message = tool_message(ctx, call_id, content, synthetic=True)
            if parent in stored:
                try:
                    await self._store.append_messages(ctx.identity, ctx.thread_id, [message])
                except Exception:
                    logger.warning("could not store a synthetic tool result", extra={"run_id": ctx.run_id})
            await emit_result(emitter, message)

    async def _finalise(
        self,
        ctx: RunContext,
        emitter: RunEmitter,
        key: str,
        claim_thread: bool,
        status: RunStatus,
        result: ExecutionResult | None,
        error_code: str | None,
    ) -> None:
        """Flush buffered events, record the outcome, free the thread; each step is tried even if another fails.

        The stream is flushed before the ledger says the run ended, so a reader that sees the ended run in the
        ledger and no terminal event on the stream knows the stream lost it (and rebuilds it from the ledger).
        """
        tenant = ctx.identity.tenant_id
        if emitter.pending:
            await emitter.flush(self._flush_timeout_s)
        try:
            await self._store.finish_run(
                tenant,
                ctx.run_id,
                status=status.value,
                usage=merge_usage(result.usage) if result else [],
                last_stream_id=emitter.last_id,
                error_code=error_code,
            )
        except Exception:
            # The run stays "running" with a heartbeat that stops: the sweeper ends it (shared.runs.sweeper).
            logger.exception("could not record the end of the run", extra={"run_id": ctx.run_id})
        if claim_thread:
            try:
                await self._store.release_thread(tenant, ctx.thread_id, ctx.run_id)
            except Exception:
                logger.exception("could not release the thread", extra={"run_id": ctx.run_id})
        try:
            await self._stream.expire(key, RUN_STREAM_TTL_S)
        except Exception:
            logger.warning("could not set the stream's retention", extra={"run_id": ctx.run_id})

    async def tail(
        self, key: str, *, after: str = "0-0", until_terminal: bool = True
    ) -> AsyncIterator[StreamEntry | None]:
        """Entries after ``after``; ``None`` marks a silent stretch (send a ping). A run's tail ends after the
        terminal event; a thread's tail (``until_terminal=False``) goes on until the client leaves, or until the
        stream has been unreachable for the outage grace period (the client then resumes with its last id)."""
        cursor = after
        block_ms = int(self._ping_interval_s * 1000)
        while True:
            entries = await self._read_through_outage(key, cursor, block_ms)
            if entries is None:
                return
            if not entries:
                yield None
                continue
            for entry in entries:
                cursor = entry.id
                yield entry
                if until_terminal and is_terminal(entry.event):
                    return

    async def tail_run(self, tenant_id: str, run_id: str, *, after: str = "0-0") -> AsyncIterator[StreamEntry | None]:
        """A run's events after ``after`` until its terminal event; ``None`` marks a silent stretch.

        Always ends with exactly one terminal event: the stream's own; or, when the ledger says the run ended and
        the stream has none (lost in an outage, or the process died), one rebuilt from the ledger; or, when the
        stream stays unreachable, ``RUN_ERROR`` ``stream_unavailable`` (the run itself goes on). Rebuilt events
        carry an empty id: they are not on the stream and cannot be resumed from.
        """
        key = run_stream_key(tenant_id, run_id)
        cursor = after
        block_ms = int(self._ping_interval_s * 1000)
        while True:
            entries = await self._read_through_outage(key, cursor, block_ms)
            if entries is None:
                yield synthetic_entry(
                    {"type": "RUN_ERROR", "message": STREAM_UNAVAILABLE_MESSAGE, "code": STREAM_UNAVAILABLE}
                )
                return
            if not entries:
                ended = await self._ended_run(tenant_id, run_id)
                if ended is not None:
                    # The ledger records the end only after the run's last event was flushed: one more look at
                    # the stream tells whether the terminal event made it there.
                    entries = await self._read_through_outage(key, cursor, 0) or []
                    if not entries:
                        yield synthetic_entry(terminal_from_ledger(ended))
                        return
                else:
                    yield None
                    continue
            for entry in entries:
                cursor = entry.id
                yield entry
                if is_terminal(entry.event):
                    return

    async def _ended_run(self, tenant_id: str, run_id: str) -> Run | None:
        try:
            run = await self._store.get_run(tenant_id, run_id)
        except Exception:
            logger.warning("could not read the run ledger while tailing", extra={"run_id": run_id})
            return None
        return run if run is not None and run.status.is_terminal else None

    async def _read_through_outage(self, key: str, cursor: str, block_ms: int) -> list[StreamEntry] | None:
        """``read_after``, retried while the stream is unreachable; None once the outage outlasts the grace."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        while True:
            try:
                return await self._stream.read_after(key, cursor, block_ms=block_ms)
            except Exception:
                now = loop.time()
                if deadline is None:
                    logger.warning("event stream unreachable while tailing", extra={"key": key})
                    deadline = now + self._stream_outage_grace_s
                if now >= deadline:
                    return None
                await asyncio.sleep(min(0.25, deadline - now))

    async def wait_idle(self) -> None:
        """Wait for every background run of this process (tests and graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    @property
    def active_runs(self) -> int:
        return len(self._tasks)


def _cause(exc: BaseException) -> str:
    """What went wrong, for the log only (a provider's message may carry internals the client must not see)."""
    return f"{type(exc).__name__}: {exc}"[:500]

"""How a run ends: its outcome, what it left open closed, its bookkeeping, and its terminal event last.

On Lambda an execution environment is frozen as soon as the invocation's response ends, and a reader ends its
response at the terminal event. So a run settles in this order (``Settlement.settle``): its events are flushed, the
ledger records the outcome, the thread is released, the stream's retention is set, the run's metrics and the
run-completed publish go out, and only then is the terminal event (RUN_FINISHED or RUN_ERROR) appended. With
limits, the run's reservation is settled with what it used right after the ledger entry, so the next request of
its user, sent once the terminal event is read, is judged on it. Each step is
tried even if another fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from ag_ui.core import BaseEvent, RunErrorEvent, RunFinishedEvent, StepFinishedEvent

from shared.errors import ModelError
from shared.executors.context import RunContext
from shared.limits.gate import LimitGate
from shared.models import RunStatus, merge_usage
from shared.ports import EventStream, RunLedger, ThreadStore
from shared.run_events.emitter import RunEmitter
from shared.run_events.tool_results import emit_result, synthetic_error, tool_message
from shared.run_results import ExecutionFailed, ExecutionResult
from shared.runs.outcomes import (
    RUN_DEADLINE,
    RUN_ERROR_MESSAGES,
    run_error_of,
    usage_metadata,
    usage_to_agui,
)
from shared.tracing.api import span
from shared.tracing.runs import finish_run

logger = logging.getLogger(__name__)

AFTER_RUN_TIMEOUT_S = 10.0
"""The most the run-finished hook (metrics, run-completed publish) may hold back the terminal event."""

RunFinishedHook = Callable[[RunContext, RunStatus, ExecutionResult], Awaitable[None]]


class Outcome(NamedTuple):
    """How a run ended: what the ledger records, and the terminal event that goes on the stream last."""

    status: RunStatus = RunStatus.FAILED
    result: ExecutionResult | None = None
    error_code: str | None = None
    terminal: BaseEvent | None = None


def shutdown_outcome() -> Outcome:
    """What settles a run whose own task is cancelled (process shutdown): failed, with a RUN_ERROR."""
    return Outcome(terminal=RunErrorEvent(message=RUN_ERROR_MESSAGES["run_failed"], code="run_failed"))


def finished(ctx: RunContext, result: ExecutionResult) -> Outcome:
    """The executor returned: succeeded, or cancelled when it wound down on a cancel."""
    outcome: dict[str, Any] = {"type": "cancelled" if result.cancelled else "success"}
    if result.interrupts and not result.cancelled:
        # Tool calls held for approval (shared.executors.approvals): AG-UI 1.0's interrupt outcome.
        outcome = {"type": "interrupt", "interrupts": list(result.interrupts)}
    elif result.pending_tool_call_ids and not result.cancelled:
        # Front-end tool calls handed to the client (AG-UI's success outcome names them).
        outcome["pendingToolCallIds"] = list(result.pending_tool_call_ids)
    return Outcome(
        status=RunStatus.CANCELLED if result.cancelled else RunStatus.SUCCEEDED,
        result=result,
        terminal=RunFinishedEvent(
            thread_id=ctx.thread_id,
            run_id=ctx.run_id,
            outcome=outcome,
            usage=usage_to_agui(result.usage),
            metadata=usage_metadata(result.usage),
        ),
    )


class Settlement:
    """Builds a run's outcome and settles it (the module docstring says in which order)."""

    def __init__(
        self,
        threads: ThreadStore,
        runs: RunLedger,
        stream: EventStream,
        *,
        flush_timeout_s: float,
        after_run_timeout_s: float = AFTER_RUN_TIMEOUT_S,
        on_run_finished: RunFinishedHook | None = None,
        limits: LimitGate | None = None,
    ) -> None:
        self._threads = threads
        self._runs = runs
        self._limits = limits
        self._stream = stream
        self._flush_timeout_s = flush_timeout_s
        self.flush_timeout_s = flush_timeout_s
        self._after_run_timeout_s = after_run_timeout_s
        self._on_run_finished = on_run_finished

    async def out_of_time(self, ctx: RunContext, emitter: RunEmitter, result: ExecutionResult) -> Outcome:
        """The run was stopped at its deadline (the executor wound down as on a cancel): RUN_ERROR run_deadline."""
        await self._close_open(ctx, emitter)
        return Outcome(
            status=RunStatus.FAILED,
            result=result,
            error_code=RUN_DEADLINE,
            terminal=RunErrorEvent(
                message=RUN_ERROR_MESSAGES[RUN_DEADLINE],
                code=RUN_DEADLINE,
                usage=usage_to_agui(result.usage),
                metadata=usage_metadata(result.usage),
            ),
        )

    async def failed(self, ctx: RunContext, emitter: RunEmitter, exc: Exception) -> Outcome:
        """Close what the run left open on its stream; the RUN_ERROR itself comes last (``settle``)."""
        cause, partial_usage = ExecutionFailed.unwrap(exc)
        partial_usage = [*ctx.prior_usage, *partial_usage]  # a later slice: the earlier ones' usage counts too
        error_code, message = run_error_of(cause)
        _log_failure(ctx, cause, error_code)
        await self._close_open(ctx, emitter)
        return Outcome(
            status=RunStatus.FAILED,
            result=ExecutionResult(usage=partial_usage),
            error_code=error_code,
            terminal=RunErrorEvent(
                message=message,
                code=error_code,
                usage=usage_to_agui(partial_usage),
                metadata=usage_metadata(partial_usage),
            ),
        )

    async def _close_open(self, ctx: RunContext, emitter: RunEmitter) -> None:
        """Close what the run left open on its stream (tool calls, the step) before its RUN_ERROR."""
        try:
            await self._answer_open_calls(ctx, emitter)
            if emitter.open_step is not None:
                # sse-events.md §2 rule 4: the step is closed before the terminal event, failure or not.
                await emitter.emit(StepFinishedEvent(step_name=emitter.open_step))
        except Exception:
            logger.exception("could not close the failed run's open events", extra={"run_id": ctx.run_id})

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
            stored = await self._threads.known_message_ids(tenant, ctx.thread_id, parents)
        except Exception:
            stored = set()
        content = synthetic_error("run_failed", "the run failed before this tool ran")
        for call_id, parent in list(emitter.unanswered_calls.items()):
            message = tool_message(ctx, call_id, content, synthetic=True)
            if parent in stored:
                try:
                    await self._threads.append_messages(ctx.identity, ctx.thread_id, [message])
                except Exception:
                    logger.warning("could not store a synthetic tool result", extra={"run_id": ctx.run_id})
            await emit_result(emitter, message)

    async def settle(self, ctx: RunContext, emitter: RunEmitter, claim_thread: bool, outcome: Outcome) -> None:
        """Everything a run's end needs, then its terminal event last; each step is tried even if another fails.

        The ledger records the end only after the stream has every event but the terminal one, so a reader that
        sees an ended run and no terminal event waits for it, then rebuilds it from the ledger (``tail_run``).
        """
        with span("agent.settle"):
            on_stream = await emitter.flush(self._flush_timeout_s) if emitter.pending else True
            await self._record(ctx, emitter, claim_thread, outcome)
            await self._after_run(ctx, outcome)
        # The run's span ends before its terminal event: the response (and the invocation) may end right after it.
        finish_run(outcome.status.value, outcome.error_code, outcome.result.usage if outcome.result else [])
        if outcome.terminal is None:  # pragma: no cover - every outcome has one
            return
        try:
            await emitter.emit(outcome.terminal)
            # A stream that already failed the last flush gets one more try, not another full wait.
            await emitter.flush(self._flush_timeout_s if on_stream else 0.0)
        except Exception:
            logger.exception("could not write the terminal event", extra={"run_id": ctx.run_id})

    async def _record(self, ctx: RunContext, emitter: RunEmitter, claim_thread: bool, outcome: Outcome) -> None:
        """The ledger entry and the thread release (the stream's retention is the stream adapter's: every key it
        writes expires)."""
        tenant = ctx.identity.tenant_id
        result = outcome.result
        # What the outcome left open, as ``finished`` reports it: the interrupts, else the front-end calls.
        interrupts = result.interrupts if result and outcome.status is RunStatus.SUCCEEDED else []
        pending = result.pending_tool_call_ids if result and outcome.status is RunStatus.SUCCEEDED else []
        try:
            await self._runs.finish_run(
                tenant,
                ctx.run_id,
                status=outcome.status.value,
                usage=merge_usage(result.usage) if result else [],
                last_stream_id=emitter.last_id,
                error_code=outcome.error_code,
                pending_tool_call_ids=() if interrupts else pending,
                interrupts=interrupts,
            )
        except Exception:
            # The run stays "running" with a heartbeat that stops: a takeover or the sweeper ends it.
            logger.exception("could not record the end of the run", extra={"run_id": ctx.run_id})
        if self._limits is not None:
            # After the ledger: a retry that reads the run as ended gives back the slot it re-took (admission).
            usage = outcome.result.usage if outcome.result else []
            await self._limits.settle(tenant, ctx.run_id, usage, ctx.meta.executor.value)
        if claim_thread:
            try:
                await self._threads.release_thread(tenant, ctx.thread_id, ctx.run_id)
            except Exception:
                logger.exception("could not release the thread", extra={"run_id": ctx.run_id})

    async def _after_run(self, ctx: RunContext, outcome: Outcome) -> None:
        """The run-finished hook (metrics, the run-completed publish), bounded so the terminal event always goes out."""
        if self._on_run_finished is None or outcome.result is None:
            return
        try:
            await asyncio.wait_for(
                self._on_run_finished(ctx, outcome.status, outcome.result), timeout=self._after_run_timeout_s
            )
        except TimeoutError:
            logger.error("run-finished hook timed out", extra={"run_id": ctx.run_id})
        except Exception:
            logger.exception("run-finished hook failed", extra={"run_id": ctx.run_id})


def _log_failure(ctx: RunContext, exc: BaseException, code: str) -> None:
    """One log line per failed run. A model failure is not a bug of ours: a transient one (the provider was busy, a
    single-slot server cut the stream for another request) is a one-line warning, since the work is retried (a new
    run, a redelivered memory event); a rejected request is an error with the provider's explanation; only an
    unexpected failure carries a traceback."""
    extra: dict[str, Any] = {"run_id": ctx.run_id, "thread_id": ctx.thread_id, "code": code, "cause": _cause(exc)}
    if isinstance(exc, ModelError):
        details = exc.details if isinstance(exc.details, dict) else {}
        extra.update({k: details[k] for k in ("provider", "model", "provider_model", "status") if k in details})
        if exc.transient:
            logger.warning("run failed (transient, retryable): %s", exc.code, extra={**extra, "retryable": True})
        else:
            logger.error("run failed: %s", _cause(exc), extra={**extra, "retryable": False})
        return
    logger.exception("run failed", extra=extra)


def _cause(exc: BaseException) -> str:
    """What went wrong, for the log only (a provider's message may carry internals the client must not see)."""
    return f"{type(exc).__name__}: {exc}"[:500]

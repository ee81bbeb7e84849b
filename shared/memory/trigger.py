"""The trigger path's first hop: after a worker run, publish ``agent.run.completed`` to the event bus; after a
branch switch, ``agent.branch.switched`` (docs/memory.md, "Memories and branches": a branch that stops being current
for the quiet period has its only-evidence memories retracted, with no run needed to notice).

A rule on the bus sends the events to the memory queue (``template.yaml``: ``RunCompletedRule`` ->
``MemoryQueue``), which ``functions/memory_extract`` consumes. Publishing must never break the user's run:
``put_events`` reports failures per entry (``FailedEntryCount``) without raising, so each result is checked;
failed entries (and calls that raise) are retried with exponential backoff, :data:`ATTEMPTS` times in all,
logged, and then given up. A lost event is not a lost memory: the per-thread cursor means the next run's event
covers the same messages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from shared.executors.context import RunContext
from shared.memory.models import BusEvent, PublishFailure
from shared.memory.ports import EventPublisher
from shared.models import ExecutorKind, Identity, Run, RunStatus
from shared.run_results import ExecutionResult

logger = logging.getLogger(__name__)

EVENT_SOURCE = "agent-backend"
RUN_COMPLETED = "agent.run.completed"
BRANCH_SWITCHED = "agent.branch.switched"
MEMORY_DETAIL_TYPES = (RUN_COMPLETED, BRANCH_SWITCHED)
"""The detail types the memory queue's rule routes (``template.yaml``: ``RunCompletedRule``; a test compares)."""
ATTEMPTS = 3
BASE_DELAY_S = 0.2


def run_completed_event(
    *,
    tenant_id: str,
    user_id: str,
    thread_id: str,
    run_id: str,
    executor: str,
    status: str,
    outcome: dict[str, Any] | None = None,
) -> BusEvent:
    """``outcome``: how a finished run ended (``RUN_FINISHED``'s, wire form), for its webhook (the ledger keeps only
    the status); the memory consumers ignore it."""
    detail: dict[str, Any] = {
        "tenantId": tenant_id,
        "userId": user_id,
        "threadId": thread_id,
        "runId": run_id,
        "executor": executor,
        "status": status,
    }
    if outcome is not None:
        detail["outcome"] = outcome
    return BusEvent(source=EVENT_SOURCE, detail_type=RUN_COMPLETED, detail=detail)


def finished_outcome(status: RunStatus, result: ExecutionResult | None) -> dict[str, Any] | None:
    """The outcome a succeeded run's ``RUN_FINISHED`` carried (interrupts, or front-end calls left pending); None
    for any other status (the status says it all)."""
    if status is not RunStatus.SUCCEEDED or result is None:
        return None
    if result.interrupts:
        return {"type": "interrupt", "interrupts": list(result.interrupts)}
    if result.pending_tool_call_ids:
        return {"type": "success", "pendingToolCallIds": list(result.pending_tool_call_ids)}
    return {"type": "success"}


def branch_switched_event(*, tenant_id: str, user_id: str, thread_id: str, leaf_id: str) -> BusEvent:
    return BusEvent(
        source=EVENT_SOURCE,
        detail_type=BRANCH_SWITCHED,
        detail={"tenantId": tenant_id, "userId": user_id, "threadId": thread_id, "leafMessageId": leaf_id},
    )


class RunCompletedPublisher:
    """Publishes run-completed events with per-entry retries; :meth:`publish` never raises."""

    def __init__(
        self,
        publisher: EventPublisher,
        *,
        attempts: int = ATTEMPTS,
        base_delay_s: float = BASE_DELAY_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self._publisher = publisher
        self._attempts = attempts
        self._base_delay_s = base_delay_s
        self._sleep = sleep

    async def publish(self, events: Sequence[BusEvent]) -> bool:
        """True when every event was accepted; False (logged) when some were still failing after the retries."""
        pending = list(events)
        for attempt in range(1, self._attempts + 1):
            try:
                failures = await self._publisher.publish(pending)
            except Exception as exc:
                failures = [PublishFailure(i, type(exc).__name__, str(exc)[:300]) for i in range(len(pending))]
            if not failures:
                return True
            failed_indexes = {f.index for f in failures}
            pending = [event for i, event in enumerate(pending) if i in failed_indexes]
            final = attempt == self._attempts
            logger.log(
                logging.ERROR if final else logging.WARNING,
                "event publish failed" + ("; giving up" if final else "; retrying"),
                extra={
                    "attempt": attempt,
                    "failed_entries": len(failures),
                    "error_codes": sorted({f.code for f in failures}),
                    "detail_types": sorted({e.detail_type for e in pending}),
                    "run_ids": [e.detail.get("runId") for e in pending],
                },
            )
            if not final:
                await self._sleep(self._base_delay_s * 2 ** (attempt - 1))
        return False

    async def run_completed(
        self, ctx: RunContext, status: RunStatus, result: ExecutionResult | None = None
    ) -> bool:
        """Publish ``agent.run.completed`` for a finished worker run (memory runs never trigger memory runs); its
        webhook is sent from the same event (``shared.webhooks``)."""
        if ctx.meta.executor is not ExecutorKind.WORKER:
            return False
        event = run_completed_event(
            tenant_id=ctx.identity.tenant_id,
            user_id=ctx.identity.user_id,
            thread_id=ctx.thread_id,
            run_id=ctx.run_id,
            executor=ctx.meta.executor.value,
            status=status.value,
            outcome=finished_outcome(status, result),
        )
        try:
            return await self.publish([event])
        except Exception:  # pragma: no cover - publish() already contains every failure
            logger.exception("event publish failed unexpectedly", extra={"run_id": ctx.run_id})
            return False

    async def run_ended(self, run: Run) -> bool:
        """Publish ``agent.run.completed`` for a queued worker run recorded as ended without having run (cancelled
        while queued, refused at its turn): its webhook goes out as any run's; the memory consumers find nothing
        new on the thread."""
        event = run_completed_event(
            tenant_id=run.tenant_id,
            user_id=run.user_id,
            thread_id=run.thread_id,
            run_id=run.run_id,
            executor=run.meta.executor.value,
            status=run.status.value,
            outcome={"type": "cancelled"} if run.status is RunStatus.CANCELLED else None,
        )
        return await self.publish([event])

    async def branch_switched(self, identity: Identity, thread_id: str, leaf_id: str) -> bool:
        """Publish ``agent.branch.switched`` after ``PUT /threads/{id}/branch`` (never raises)."""
        event = branch_switched_event(
            tenant_id=identity.tenant_id, user_id=identity.user_id, thread_id=thread_id, leaf_id=leaf_id
        )
        try:
            return await self.publish([event])
        except Exception:  # pragma: no cover - publish() already contains every failure
            logger.exception("event publish failed unexpectedly", extra={"thread_id": thread_id})
            return False

    def hook(self) -> Callable[[RunContext, RunStatus, ExecutionResult], Awaitable[None]]:
        """A ``RunService(on_run_finished=...)`` hook publishing for every finished worker run."""

        async def on_run_finished(ctx: RunContext, status: RunStatus, result: ExecutionResult) -> None:
            await self.run_completed(ctx, status, result)

        return on_run_finished

"""The memory worker of the local runner: "run completed" and "branch switched" events go to an in-process queue
instead of EventBridge/SQS, and the same :class:`~shared.memory.coalescing.ExtractionCoalescer` the memory Lambda uses
consumes them in the background, after the same title job (``shared.titles.job``). Delayed "extraction due"
messages are in-process timers standing in for SQS ``DelaySeconds``; ``MEMORY_IDLE_S`` shortens the quiet period
(the local runner defaults it to a few seconds)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from shared.memory.coalescing import ExtractionCoalescer, ExtractionDue
from shared.memory.job import BranchSwitched, ExtractionReport, MemoryRunFailed, RunCompleted
from shared.memory.models import BusEvent, PublishFailure
from shared.memory.trigger import BRANCH_SWITCHED

if TYPE_CHECKING:
    from shared.wiring import Services

logger = logging.getLogger(__name__)


class InProcessMemoryWorker:
    """An ``EventPublisher`` (events) and a ``DueQueue`` (delayed due messages) served by background tasks."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._coalescer: ExtractionCoalescer | None = None

    @property
    def coalescer(self) -> ExtractionCoalescer:
        if self._coalescer is None:
            self._coalescer = self._services.coalescer(queue=self)
        return self._coalescer

    async def publish(self, events: Sequence[BusEvent]) -> list[PublishFailure]:
        for event in events:
            if event.detail_type == BRANCH_SWITCHED:
                switch = BranchSwitched.model_validate(event.detail)
                self._spawn(self.coalescer.on_branch_switched(switch), switch.thread_id)
                continue
            detail = RunCompleted.model_validate(event.detail)
            self._spawn(self._after_run(detail), detail.thread_id)
        return []

    async def _after_run(self, detail: RunCompleted) -> ExtractionReport:
        """As the memory function: the thread's title (first exchange only), then the extraction's bookkeeping."""
        title = await self._services.titler.on_run_completed(detail)
        logger.info("thread title %s: %s", title.status, title.reason, extra={"thread_id": detail.thread_id})
        return await self.coalescer.on_run_completed(detail)

    async def send(self, due: ExtractionDue, *, delay_s: int) -> None:
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.discard(handle)
            self._spawn(self.coalescer.on_due(due), due.thread_id)

        handle = loop.call_later(max(delay_s, 0), fire)
        self._timers.add(handle)

    async def drain(self) -> None:
        """Wait for the background tasks started so far (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def close(self) -> None:
        for handle in list(self._timers):
            handle.cancel()
        self._timers.clear()

    def _spawn(self, work: Coroutine[Any, Any, ExtractionReport], thread_id: str) -> None:
        task = asyncio.create_task(self._log(work, thread_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _log(self, work: Coroutine[Any, Any, ExtractionReport], thread_id: str) -> None:
        try:
            report = await work
            extra = {"thread_id": thread_id, **report.to_dict()}
            logger.info("memory extraction %s: %s", report.status, report.reason, extra=extra)
        except MemoryRunFailed as exc:
            if not exc.retryable:
                logger.exception("memory extraction failed", extra={"thread_id": thread_id})
                return
            # A passing failure (a single-slot model server cut the stream for another request, say): the cursor
            # did not move, so the next extraction on this thread reads these messages again.
            logger.warning(
                "memory extraction cut short (%s); the next extraction on this thread covers its messages",
                exc.details.get("error_code"),
                extra={"thread_id": thread_id, "retryable": True},
            )
        except Exception:
            logger.exception("memory extraction failed", extra={"thread_id": thread_id})

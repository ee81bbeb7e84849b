"""The memory worker of the local runner: "run completed" events go to an in-process queue instead of
EventBridge/SQS, and the same ``MemoryExtraction`` the memory Lambda uses consumes them in the background."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from shared.memory.job import MemoryExtraction, RunCompleted
from shared.memory.trigger import BusEvent, PublishFailure

if TYPE_CHECKING:
    from shared.wiring import Services

logger = logging.getLogger(__name__)


class InProcessMemoryWorker:
    """An ``EventPublisher`` whose events are extracted by a background task of the same process."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._tasks: set[asyncio.Task[None]] = set()

    async def publish(self, events: Sequence[BusEvent]) -> list[PublishFailure]:
        for event in events:
            task = asyncio.create_task(self._extract(RunCompleted.model_validate(event.detail)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return []

    async def _extract(self, event: RunCompleted) -> None:
        try:
            report = await MemoryExtraction.from_services(self._services).on_run_completed(event)
            logger.info("memory extraction", extra={"run_id": event.run_id, "status": report.status})
        except Exception:
            logger.exception("memory extraction failed", extra={"run_id": event.run_id})

"""The webhook queue of the local runner: run-ended events are handed on to the memory worker as before, and also
delivered in the background by the same :class:`~shared.webhooks.delivery.WebhookDelivery` the webhook function
runs, with the same exponential backoff on a much shorter clock (:data:`BASE_BACKOFF_S`), :data:`ATTEMPTS` times
in all; the last failure is logged as dead-lettered. Only loopback targets are reachable with
``WEBHOOK_ALLOW_LOOPBACK`` (docs/deployment.md, "Webhooks")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from shared.memory.models import BusEvent, PublishFailure
from shared.memory.ports import EventPublisher
from shared.memory.trigger import RUN_COMPLETED
from shared.webhooks.delivery import DeliveryFailed, RunEnded, RunNotSettled

if TYPE_CHECKING:
    from shared.wiring import Services

logger = logging.getLogger(__name__)

ATTEMPTS = 5
BASE_BACKOFF_S = 1.0


class InProcessWebhookQueue:
    """An ``EventPublisher`` in front of another: every event goes on to ``inner``; run-ended ones are delivered."""

    def __init__(self, services: Services, inner: EventPublisher, *, base_backoff_s: float = BASE_BACKOFF_S) -> None:
        self._services = services
        self._inner = inner
        self._base_backoff_s = base_backoff_s
        self._tasks: set[asyncio.Task[None]] = set()

    async def publish(self, events: Sequence[BusEvent]) -> list[PublishFailure]:
        for event in events:
            if event.detail_type == RUN_COMPLETED:
                d = event.detail
                outcome = d.get("outcome")
                ended = RunEnded(
                    d["tenantId"], d["threadId"], d["runId"], outcome if isinstance(outcome, dict) else None
                )
                task = asyncio.create_task(self._deliver(ended))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        return await self._inner.publish(events)

    async def drain(self) -> None:
        """Wait for the deliveries started so far (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _deliver(self, ended: RunEnded) -> None:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                await self._services.webhook_delivery.deliver(ended, attempt=attempt)
                return
            except (DeliveryFailed, RunNotSettled) as exc:
                if attempt == ATTEMPTS:
                    logger.error("webhook dead-lettered: %s", exc, extra={"run_id": ended.run_id})
                    return
                await asyncio.sleep(self._base_backoff_s * 2 ** (attempt - 1))
            except Exception:
                logger.exception("webhook delivery failed", extra={"run_id": ended.run_id})
                return

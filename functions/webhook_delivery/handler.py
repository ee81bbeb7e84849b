"""SQS batch handler of the webhook queue (``template.yaml``: ``WebhookFunction``): one record per run-ended event
(``agent.run.completed``, routed by ``RunEndedWebhookRule``), delivered by :class:`shared.webhooks.delivery.
WebhookDelivery`.

- A record whose target failed (non-2xx, no answer in ``WEBHOOK_TIMEOUT_S``) is reported as a batch item failure
  after its visibility is stretched to :func:`backoff_s` of its receive count: SQS redelivers it then, and after
  the queue's ``maxReceiveCount`` moves it to the dead-letter queue. Delivery is at least once.
- Runs without a webhook target end here at once (the rule cannot tell; the ledger can).
- The run itself is long over: nothing here can block or fail it.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel, SqsRecordModel
from aws_lambda_powertools.utilities.parser.types import Json
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field

from shared.container import container_loop, container_services
from shared.memory.trigger import EVENT_SOURCE
from shared.webhooks.delivery import DeliveryFailed, RunEnded, RunNotSettled
from shared.wiring import Services
from shared.wiring.settings import WebhookFunctionSettings

logger = logging.getLogger(__name__)

BASE_BACKOFF_S = 30
MAX_BACKOFF_S = 3600


def backoff_s(receive_count: int) -> int:
    """How long before the next attempt after attempt ``receive_count`` failed: 30 s, 60 s, 120 s, ... 1 h."""
    return int(min(MAX_BACKOFF_S, BASE_BACKOFF_S * 2 ** max(0, receive_count - 1)))


class RunEndedDetail(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)

    tenant_id: str = Field(alias="tenantId", min_length=1)
    thread_id: str = Field(alias="threadId", min_length=1)
    run_id: str = Field(alias="runId", min_length=1)
    outcome: dict[str, Any] | None = None


class RunEndedEvent(EventBridgeModel):
    account: str | None = None  # type: ignore[assignment]  # routed events may lack it (moto does)
    detail_type: Literal["agent.run.completed"] = Field(alias="detail-type")
    detail: RunEndedDetail


class WebhookQueueRecord(SqsRecordModel):
    body: Json[RunEndedEvent]


class WebhookHandler:
    """The handler with its dependencies; tests build one around their own ``Services``."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._loop = container_loop()
        self._processor = BatchProcessor(
            event_type=EventType.SQS, model=WebhookQueueRecord, raise_on_entire_batch_failure=False
        )

    def handle(self, event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        return dict(
            process_partial_response(
                event=event, record_handler=self._record, processor=self._processor, context=context
            )
        )

    def _record(self, record: WebhookQueueRecord) -> dict[str, Any]:
        body = record.body
        if body.source != EVENT_SOURCE:
            raise ValueError(f"unexpected event {body.source}/{body.detail_type}")
        attempt = int(record.attributes.ApproximateReceiveCount)
        detail = body.detail
        ended = RunEnded(detail.tenant_id, detail.thread_id, detail.run_id, detail.outcome)
        try:
            report = self._loop.run_until_complete(self._services.webhook_delivery.deliver(ended, attempt=attempt))
        except (DeliveryFailed, RunNotSettled):
            self._back_off(record.receiptHandle, attempt)
            raise
        return {"eventType": report.event_type, "delivered": report.delivered, "refused": report.refused}

    def _back_off(self, receipt_handle: str, attempt: int) -> None:
        backoff = self._services.webhook_backoff
        if backoff is None:
            return
        try:
            self._loop.run_until_complete(backoff.delay(receipt_handle, backoff_s(attempt)))
        except Exception:
            # The queue's own visibility timeout still brings the record back: a fixed delay, not a lost event.
            logger.warning("webhook backoff not set", exc_info=True)


_handler: WebhookHandler | None = None


def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    global _handler
    if _handler is None:
        _handler = WebhookHandler(container_services(WebhookFunctionSettings))
    return _handler.handle(event, context)

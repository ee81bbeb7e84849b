"""SQS batch handler for memory extraction (``template.yaml``: ``MemoryFunction``).

The queue carries three kinds of record: ``agent.run.completed`` and ``agent.branch.switched`` events (from the
EventBridge rule) and the delayed ``memory.extraction.due`` messages that
:class:`shared.memory.coalescing.ExtractionCoalescer` sends to this same queue. The events are noted (a run's
extracted at once only when enough user messages wait); the due messages fire one coalesced extraction per quiet
period.

- **Batch**: Powertools ``BatchProcessor`` with a Parser model of an SQS record wrapping an EventBridge event;
  the response lists exactly the records that failed (``ReportBatchItemFailures``), including records that do
  not parse. ``raise_on_entire_batch_failure=False``: a batch in which every record failed is answered the same
  way rather than by an exception.
- **Idempotency**: each record is processed through ``@idempotent_function`` keyed by the EventBridge event id
  or the due message's id (``DynamoDBPersistenceLayer`` on the idempotency table), so a redelivered message
  returns the stored result without running again. A failed record leaves no idempotency record and is retried
  by SQS (then the DLQ).
- The work itself is :class:`shared.memory.coalescing.ExtractionCoalescer`, and for a run-completed event first
  :class:`shared.titles.job.ThreadTitler` (a thread's title after its first exchange). ``Services`` and the handler are
  created during Lambda's INIT phase (at import, :func:`shared.container.init_container`), once per container,
  with one event loop for the container's life (the Redis client must not move between loops).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Literal

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.idempotency import (
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel, SqsRecordModel
from aws_lambda_powertools.utilities.parser.types import Json
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field

from shared.container import container_loop, init_container
from shared.memory.coalescing import ExtractionCoalescer, ExtractionDue
from shared.memory.job import BranchSwitched, RunCompleted
from shared.memory.trigger import EVENT_SOURCE
from shared.runs.deadline import deadline_from_context
from shared.tenancy import TENANT_NOT_SERVED, count_dropped_event
from shared.tracing.api import tracer
from shared.wiring import Services
from shared.wiring.settings import MemoryFunctionSettings, load_settings

logger = logging.getLogger(__name__)

IDEMPOTENCY_TTL_S = 4 * 24 * 3600
"""As long as the queue keeps a message (``MessageRetentionPeriod``): a redelivery is always recognised."""


class RunCompletedEvent(EventBridgeModel):
    """An ``agent.run.completed`` event as EventBridge delivers it to SQS."""

    account: str | None = None  # type: ignore[assignment]  # routed events may lack it (moto does)
    detail_type: Literal["agent.run.completed"] = Field(alias="detail-type")
    detail: RunCompleted


class BranchSwitchedEvent(EventBridgeModel):
    """An ``agent.branch.switched`` event as EventBridge delivers it to SQS."""

    account: str | None = None  # type: ignore[assignment]  # routed events may lack it (moto does)
    detail_type: Literal["agent.branch.switched"] = Field(alias="detail-type")
    detail: BranchSwitched


class MemoryQueueRecord(SqsRecordModel):
    body: Json[RunCompletedEvent | BranchSwitchedEvent | ExtractionDue]


class UnexpectedEvent(ValueError):
    pass


class MemoryExtractHandler:
    """The handler with its dependencies; tests build one around their own ``Services``."""

    def __init__(self, services: Services, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._services = services
        self._loop = loop or asyncio.new_event_loop()
        self._coalescer: ExtractionCoalescer | None = None
        self._processor = BatchProcessor(
            event_type=EventType.SQS, model=MemoryQueueRecord, raise_on_entire_batch_failure=False
        )
        self._config = IdempotencyConfig(
            event_key_jmespath="id", raise_on_no_idempotency_key=True, expires_after_seconds=IDEMPOTENCY_TTL_S
        )
        self._process_once = idempotent_function(
            data_keyword_argument="event", config=self._config, persistence_store=services.idempotency_records
        )(self._process_event)

    def warm(self) -> None:
        """Build the coalescer now (during init) rather than on the first record; a part that cannot be built yet
        (a setting missing) is built on first use and fails that record."""
        try:
            self._coalescer = self._services.coalescer()
        except Exception as exc:
            logger.info("warm-up skipped the coalescer", extra={"reason": type(exc).__name__})

    def handle(self, event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        self._config.register_lambda_context(context)
        # Each memory run ends with run_deadline before the function's timeout (its record is then retried by SQS)
        # rather than the invocation being killed mid-batch.
        record = functools.partial(self._record, deadline=deadline_from_context(context))
        try:
            response = process_partial_response(
                event=event, record_handler=record, processor=self._processor, context=context
            )
        finally:
            # The memory runs' spans leave before the handler returns: Lambda may freeze the environment after it.
            self._loop.run_until_complete(tracer().flush())
        return dict(response)

    def close(self) -> None:
        """Close the container's stream client (if it was created) and event loop (tests, graceful shutdown)."""
        close = getattr(vars(self._services).get("stream"), "close", None)
        if close is not None:
            self._loop.run_until_complete(close())
        self._loop.close()

    def _record(self, record: MemoryQueueRecord, *, deadline: float | None = None) -> dict[str, Any]:
        body = record.body
        tenant = body.tenant_id if isinstance(body, ExtractionDue) else body.detail.tenant_id
        if not self._services.served_tenants.serves(tenant):
            # Another stack's tenant (SERVED_TENANTS): dropped before the idempotency record or anything else is
            # read or written, and counted; a retry would be dropped the same way, so the record succeeds.
            logger.warning("memory event of a tenant not served here dropped", extra={"tenant_id": tenant})
            count_dropped_event("memory")
            return {"dropped": TENANT_NOT_SERVED}
        attempt = int(record.attributes.ApproximateReceiveCount)
        if isinstance(body, ExtractionDue):
            event = {"id": body.id, "due": body.model_dump(by_alias=True), "attempt": attempt}
        else:
            if body.source != EVENT_SOURCE:
                raise UnexpectedEvent(f"unexpected event {body.source}/{body.detail_type}")
            kind = "switch" if isinstance(body, BranchSwitchedEvent) else "detail"
            event = {"id": body.id, kind: body.detail.model_dump(by_alias=True), "attempt": attempt}
        result: dict[str, Any] = self._process_once(event=event, deadline=deadline)
        return result

    def _process_event(self, event: dict[str, Any], deadline: float | None = None) -> dict[str, Any]:
        """One record's work; ``deadline``: the invocation's (epoch seconds), which its memory run ends before."""
        if self._coalescer is None:
            self._coalescer = self._services.coalescer()
        if "due" in event:
            due = ExtractionDue.model_validate(event["due"])
            work = self._coalescer.on_due(due, attempt=int(event.get("attempt", 1)), deadline=deadline)
        elif "switch" in event:
            work = self._coalescer.on_branch_switched(BranchSwitched.model_validate(event["switch"]))
        else:
            completed = RunCompleted.model_validate(event["detail"])
            # First the title (a model call of a second or so, and the thread's followers are waiting for it), then
            # the extraction's bookkeeping; the title job never raises, so it cannot fail the record.
            title = self._loop.run_until_complete(self._services.titler.on_run_completed(completed))
            logger.info("thread title", extra={"event_id": event["id"], **title.to_dict()})
            work = self._coalescer.on_run_completed(completed, deadline=deadline)
        report = self._loop.run_until_complete(work)
        logger.info("memory extraction", extra={"event_id": event["id"], **report.to_dict()})
        return report.to_dict()


def _at_init() -> MemoryExtractHandler | None:
    """During Lambda's INIT phase: the handler around the container's warmed services, its coalescer built."""
    services = init_container("memory")
    if services is None:
        return None
    built = MemoryExtractHandler(services, container_loop())
    built.warm()
    return built


_handler: MemoryExtractHandler | None = _at_init()


def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    global _handler
    if _handler is None:  # not initialised as Lambda initialises (a test, a local call)
        _handler = MemoryExtractHandler(Services.loaded(load_settings(MemoryFunctionSettings)))
    return _handler.handle(event, context)

"""Lambda entry point of the background-run function: drains one thread's run queue (``shared.runs.background``).

Invoked asynchronously (``LambdaQueueStarter``) with ``{"tenantId": ..., "threadId": ...}`` by the API, or with
``{"continue": <ticket>}`` by a run whose slice ended (``shared.runs.slices``: this invocation runs its next slice,
then drains the thread's queue). A drain starts the thread's queued background runs one after the other, each
once the thread is free, and executes each in this invocation until it settles (or its slice ends: it goes on in a
new invocation). When the drain's time runs out with runs still queued, it invokes the function again for the
rest before it returns. A retry of an event whose runs already started finds them in the ledger and starts
nothing twice; a ticket for a run that ended, or runs elsewhere, starts nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from shared.container import container_services, init_container, run_in_container
from shared.errors import InvalidRequest
from shared.runs import intake
from shared.runs.deadline import deadline_from_context
from shared.tenancy import TENANT_NOT_SERVED, count_dropped_event
from shared.wiring import Services
from shared.wiring.settings import ApiSettings

logger = logging.getLogger(__name__)

init_container("api")  # Lambda's INIT phase: the same services the API's runs use, built before the first event


def _slice_thread(ticket: Mapping[str, Any]) -> dict[str, Any]:
    return {"tenantId": ticket.get("tenant_id"), "threadId": ticket.get("thread_id")}


def thread_of(event: Mapping[str, Any]) -> tuple[str, str]:
    """The event's tenant and thread, checked as ids are everywhere (``InvalidRequest`` otherwise)."""
    tenant, thread = event.get("tenantId"), event.get("threadId")
    if not isinstance(tenant, str) or not isinstance(thread, str) or not tenant:
        raise InvalidRequest("a background-run event names a tenantId and a threadId", code="invalid_request")
    intake.check_id("threadId", thread, where="event")
    return tenant, thread


async def handle(event: Mapping[str, Any], context: Any, services: Services) -> dict[str, Any]:
    ticket = event.get("continue")
    tenant, thread = thread_of(_slice_thread(ticket) if isinstance(ticket, Mapping) else event)
    if not services.served_tenants.serves(tenant):
        # Another stack's tenant (SERVED_TENANTS): nothing is read or written; a retry would be dropped the same way.
        logger.warning("background-run event of a tenant not served here dropped", extra={"tenant_id": tenant})
        count_dropped_event("background_run")
        return {"dropped": TENANT_NOT_SERVED}
    deadline = deadline_from_context(context)
    if isinstance(ticket, Mapping):
        # A run's next slice (shared.runs.slices); then the thread's queue, which the run's end freed.
        await services.chat.continue_slice(ticket, deadline=deadline)
    drained = await services.chat.drain_queue(tenant, thread, deadline=deadline)
    if not drained.done and services.queue_starter is not None:
        await services.queue_starter.start_queue(tenant, thread)  # the rest in a new invocation
    # The runs this invocation started and how each stands now, for the log (one read each).
    runs = {run_id: await _status(services, tenant, run_id) for run_id in drained.started}
    logger.info("thread drained", extra={"thread_id": thread, "done": drained.done, "runs": runs})
    return {"threadId": thread, "drained": drained.done, "runs": runs}


async def _status(services: Services, tenant: str, run_id: str) -> str | None:
    run = await services.run_ledger.get_run(tenant, run_id)
    return run.status.value if run is not None else None


def lambda_handler(event: Mapping[str, Any], context: Any, services: Services | None = None) -> dict[str, Any]:
    """``services`` is for tests and the local runner; Lambda passes only the event and the context."""
    return run_in_container(handle(event, context, services or container_services(ApiSettings)))


handler = lambda_handler
"""The name template.yaml points at (``functions.background_run.handler.handler``)."""

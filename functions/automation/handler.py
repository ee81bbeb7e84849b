"""Lambda entry point of the automation function (target of every task's EventBridge Scheduler schedule).

The event is the schedule's ``Input`` with the Scheduler's context keywords filled in, e.g.
``{"taskId": "at_...", "tenantId": "...", "userId": "...", "scheduledTime": "2025-01-06T08:00:00Z", ...}``;
an EventBridge scheduled-event envelope with that object in ``detail`` works too. Everything else is in
``shared.automation.runner``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from shared.container import container_services, init_container, run_in_container
from shared.runs.deadline import deadline_from_context
from shared.wiring import Services
from shared.wiring.settings import AutomationFunctionSettings

logger = logging.getLogger(__name__)

init_container("automation")  # Lambda's INIT phase: the services and their clients, not on the first fire


async def handle(event: Mapping[str, Any], context: Any, services: Services) -> dict[str, Any]:
    # The run ends with run_deadline before the function's timeout rather than being killed by it.
    outcome = await services.automation_runner.handle_event(
        event, request_id=getattr(context, "aws_request_id", None), deadline=deadline_from_context(context)
    )
    return outcome.as_dict()


def lambda_handler(event: Mapping[str, Any], context: Any, services: Services | None = None) -> dict[str, Any]:
    """``services`` is for tests and the local runner; Lambda passes only the event and the context."""
    return run_in_container(handle(event, context, services or container_services(AutomationFunctionSettings)))


handler = lambda_handler
"""The name template.yaml points at (``functions.automation.handler.handler``)."""

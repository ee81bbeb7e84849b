"""Lambda entry point of the run sweeper, invoked on a schedule (every few minutes).

It ends runs whose process died mid-run; everything it does is in ``shared.runs.sweeper``. The event is ignored
(an EventBridge scheduled event or ``{}``), so a fire delivered twice only sweeps twice, and a sweep is
idempotent: each stale run is ended by exactly one conditional write.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from shared.container import container_services, run_in_container
from shared.runs.sweeper import DEFAULT_STALE_AFTER, RunSweeper
from shared.wiring import Services
from shared.wiring.settings import SweeperSettings

logger = logging.getLogger(__name__)


async def handle(services: Services, *, stale_after: timedelta = DEFAULT_STALE_AFTER) -> dict[str, Any]:
    limits = services.limits
    on_run_ended = limits.ended if limits is not None else None
    report = await RunSweeper(
        services.thread_store,
        services.run_ledger,
        services.audit_log,
        services.stream,
        stale_after=stale_after,
        on_run_ended=on_run_ended,
    ).sweep()
    return report.as_dict()


def lambda_handler(event: Mapping[str, Any], context: Any, services: Services | None = None) -> dict[str, Any]:
    """``services`` is for tests; Lambda passes only the event and the context."""
    return run_in_container(handle(services or container_services(SweeperSettings)))


handler = lambda_handler
"""The name template.yaml points at (``functions.agent_api.sweeper_handler.handler``)."""

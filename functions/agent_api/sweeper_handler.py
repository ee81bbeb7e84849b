"""Lambda entry point of the run sweeper, invoked on a schedule (every few minutes).

It ends runs whose process died mid-run; everything it does is in ``shared.runs.sweeper``. The event is ignored
(an EventBridge scheduled event or ``{}``), so a fire delivered twice only sweeps twice, and a sweep is
idempotent: each stale run is ended by exactly one conditional write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from shared.runs.sweeper import DEFAULT_STALE_AFTER, RunSweeper
from shared.settings import Settings
from shared.wiring import Services

logger = logging.getLogger(__name__)

_services: Services | None = None
_loop: asyncio.AbstractEventLoop | None = None


def _container_services() -> Services:
    global _services
    if _services is None:
        _services = Services(Settings.from_env())
    return _services


def _container_loop() -> asyncio.AbstractEventLoop:
    """One event loop per container: the Redis client built on the first invocation stays bound to it."""
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
    return _loop


async def handle(services: Services, *, stale_after: timedelta = DEFAULT_STALE_AFTER) -> dict[str, Any]:
    report = await RunSweeper(services.store, services.stream, stale_after=stale_after).sweep()
    return report.as_dict()


def lambda_handler(event: Mapping[str, Any], context: Any, services: Services | None = None) -> dict[str, Any]:
    """``services`` is for tests; Lambda passes only the event and the context."""
    return _container_loop().run_until_complete(handle(services or _container_services()))


handler = lambda_handler
"""The name template.yaml points at (``functions.agent_api.sweeper_handler.handler``)."""

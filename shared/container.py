"""What one Lambda container keeps between invocations: its services and the event loop they are bound to.

Handlers that are not ASGI apps (automation, sweeper) run their coroutine on this one loop, so async clients built
on the first invocation (Redis) stay usable on the next ones; the services are built lazily on first use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from shared.settings import Settings
from shared.wiring import Services

T = TypeVar("T")

_services: Services | None = None
_loop: asyncio.AbstractEventLoop | None = None


def container_services() -> Services:
    global _services
    if _services is None:
        _services = Services(Settings.from_env())
    return _services


def run_in_container(coro: Coroutine[Any, Any, T]) -> T:
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
    return _loop.run_until_complete(coro)

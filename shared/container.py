"""What one Lambda container keeps between invocations: its services and the event loop they are bound to.

Handlers that are not ASGI apps (automation, sweeper) run their coroutine on this one loop, so async clients built
on the first invocation (Redis) stay usable on the next ones. In a Lambda execution environment a handler module
calls :func:`init_container` while it is imported, i.e. during the INIT phase: the services are built and warmed
there, so the first invocation builds nothing. Anywhere else (tests, the import-time benchmark) importing a handler
builds nothing and the services are made on first use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from shared.settings import ProcessSettings, SettingsGroup, read_settings
from shared.startup_heap import freeze_startup_heap
from shared.tracing.api import tracer

if TYPE_CHECKING:
    from shared.wiring import LambdaFunction, Services

T = TypeVar("T")

_services: Services | None = None
_loop: asyncio.AbstractEventLoop | None = None


def container_services(settings_model: type[SettingsGroup] | None = None) -> Services:
    """The container's services, built on first use from the settings of ``settings_model`` (the function's own,
    shared.wiring.settings; default: every setting)."""
    global _services
    if _services is None:
        from shared.settings import Settings
        from shared.wiring import Services
        from shared.wiring.settings import load_settings

        _services = Services.loaded(load_settings(settings_model or Settings))
    return _services


def init_container(function: LambdaFunction) -> Services | None:
    """During a Lambda INIT: the container's services with what ``function``'s invocations use already built
    (clients created, libraries imported; no connection opened), and the container's event loop, made the thread's
    current loop (Mangum runs the buffered app on it). None outside Lambda (nothing of the wiring is even imported:
    the import-time benchmark measures the handler alone).

    Connections are left to the first invocation: on the emulated environment (moto, redis-server on loopback)
    opening them here made the memory function's first invocation slower, not faster (docs/benchmarks.md)."""
    if not read_settings(ProcessSettings).lambda_function_name:
        return None
    from shared.wiring.settings import FUNCTION_SETTINGS

    services = container_services(FUNCTION_SETTINGS[function])
    services.warm_up(function)
    asyncio.set_event_loop(container_loop())
    freeze_startup_heap()
    return services


def container_loop() -> asyncio.AbstractEventLoop:
    """The container's event loop: one for its life, so clients bound to a loop (Redis) stay usable."""
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
    return _loop


def run_in_container(coro: Coroutine[Any, Any, T]) -> T:
    loop = container_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        # The invocation's spans leave before the handler returns: Lambda may freeze the environment right after.
        loop.run_until_complete(tracer().flush())

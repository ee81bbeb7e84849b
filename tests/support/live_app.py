"""The app served by uvicorn on a free loopback port in a background thread (real sockets, real streaming)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI

from functions.agent_api.app import create_app
from shared.profiles import Profiles
from shared.wiring import ServiceOverrides, Services
from tests.support.model_server import ModelServer
from tests.support.redis_server import free_port
from tests.support.settings import make_settings


@contextmanager
def serve_app(services: Services, app_factory: Callable[[Services], FastAPI] = create_app) -> Iterator[str]:
    """Serve ``app_factory(services)`` (``create_app`` by default); yields the base URL. Clients bound to an event
    loop (Redis) must be created lazily by ``services`` so that they belong to the server's loop."""
    with serve_asgi(app_factory(services)) as url:
        yield url


@contextmanager
def serve_with_model(
    store: Any, redis_url: str, model_server: ModelServer, profiles: Profiles | None = None, **settings: Any
) -> Iterator[str]:
    """The app on the test's store and redis-server, answered by the scripted ``model_server``, on ``profiles``
    (the shipped catalog by default); ``settings`` are further `make_settings` fields. Yields the base URL."""
    configured = make_settings(
        redis_url=redis_url, llm_base_url=model_server.base_url, llm_api_key="test-key", **settings
    )
    with serve_app(Services(configured, overrides=ServiceOverrides(store=store, profiles=profiles))) as url:
        yield url


@contextmanager
def serve_asgi(app: FastAPI) -> Iterator[str]:
    """Serve an app on a free loopback port in a background thread; yields the base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)

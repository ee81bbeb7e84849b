"""The app served by uvicorn on a free loopback port in a background thread (real sockets, real streaming)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from functions.agent_api.app import create_app
from shared.wiring import Services
from tests.support.redis_server import free_port


@contextmanager
def serve_app(services: Services, app_factory: Callable[[Services], FastAPI] = create_app) -> Iterator[str]:
    """Serve ``app_factory(services)`` (``create_app`` by default); yields the base URL. Clients bound to an event
    loop (Redis) must be created lazily by ``services`` so that they belong to the server's loop."""
    with serve_asgi(app_factory(services)) as url:
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

"""The FastAPI app factory: the app, its middleware, error handlers and routers, and what runs at start-up.

The routes live in per-area routers (``routes_*.py``); each translates HTTP to one ``shared`` service call and back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, MutableMapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request

from functions.agent_api.cors import install_cors
from functions.agent_api.deps import services_of
from functions.agent_api.errors import install_error_handlers
from functions.agent_api.playground import page_router as playground_router
from functions.agent_api.routes_automations import router as automations_router
from functions.agent_api.routes_erasure import router as erasure_router
from functions.agent_api.routes_feedback_export import router as feedback_export_router
from functions.agent_api.routes_memories import router as memories_router
from functions.agent_api.routes_runs import router as runs_router
from functions.agent_api.routes_threads import router as threads_router
from functions.agent_api.routes_uploads import router as uploads_router
from functions.agent_api.routes_usage import router as usage_router
from functions.agent_api.routes_webhooks import router as webhooks_router
from shared.startup_heap import freeze_startup_heap
from shared.tracing.asgi import UNSAMPLED_PARENT, TraceRequests
from shared.wiring import Services
from shared.wiring.settings import ApiSettings, load_settings

logger = logging.getLogger(__name__)


async def _request_itself(app: FastAPI, method: str, path: str, body: bytes = b"") -> int:
    """One HTTP request to the app through its ASGI interface, as a server would make it; returns the status.

    No client library: the warm-up must run with what the functions ship (a test venv's HTTP client is not there)."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"start-up"),
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"traceparent", UNSAMPLED_PARENT.encode()),  # runs the traced path at start-up, exports nothing
        ],
        "client": ("127.0.0.1", 0),
        "server": ("start-up", 80),
    }
    request: dict[str, Any] = {"type": "http.request", "body": body, "more_body": False}
    responded = asyncio.Event()
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal request
        if request["type"] == "http.request":
            sent, request = request, {"type": "http.disconnect"}
            return sent
        await responded.wait()  # the client goes away once the response is complete, not before
        return request

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            responded.set()

    await app(scope, receive, send)
    return status


async def _exercise_routes(app: FastAPI) -> None:
    """Two requests to the app itself during start-up, so that what FastAPI and our dependencies build on the first
    request (route handlers, the auth dependency's worker thread, the error handlers) is built at init: the health
    check, and a run request without a token (refused with 401 before anything is read or stored)."""
    try:
        statuses = [
            await _request_itself(app, "GET", "/healthz"),
            await _request_itself(app, "POST", "/api/v1/agent", b"{}"),
        ]
    except Exception:
        logger.info("start-up requests failed; the first request builds the routes", exc_info=True)
        return
    if statuses != [200, 401]:
        logger.info("start-up requests answered %s, not [200, 401]", statuses)


def _lifespan(svc: Services, *, freeze_heap: bool) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Lambda's init (the Web Adapter waits for the readiness check): clients and libraries are built here, not
        # on the first request.
        svc.warm_up()
        try:
            await asyncio.wait_for(svc.connect(), timeout=2.0)
        except Exception:
            logger.warning("could not open connections during start-up; the first request will", exc_info=True)
        await _exercise_routes(app)
        if freeze_heap:
            freeze_startup_heap()  # what start-up built lives as long as the process: full collections skip it
        yield
        await svc.runs.wait_idle()

    return lifespan


async def healthz(request: Request) -> dict[str, Any]:
    """The Web Adapter's readiness check, so it never fails and never waits long: ``status`` is always ``ok``;
    ``migrations.pending`` lists the migrations this code expects that the table has not completed (read at most
    once per ``MIGRATION_STATUS_TTL_S``, each read cut off after half a second; ``checked`` false until one read
    succeeded). No ``migrations`` field in a process without the deployment's table (tests on fakes)."""
    body: dict[str, Any] = {"status": "ok"}
    try:
        pending = services_of(request).pending_migrations
        if pending is not None:
            body["migrations"] = (await pending.status()).as_health()
    except Exception:
        logger.warning("healthz could not tell the migration status", exc_info=True)
    return body


def create_app(services: Services | None = None, *, freeze_heap: bool | None = None) -> FastAPI:
    """The app; ``services`` for tests and local servers (default: built from the environment, as deployed).

    ``freeze_heap``: at the end of start-up, move what it built out of the garbage collector's reach
    (``shared.startup_heap``). Default: only for the deployed app (no ``services`` given). A server process that
    passes its own services says so (the benchmarks' server does); tests that build many apps, and ``make dev``,
    which shares its app factory with them, do not."""
    if freeze_heap is None:
        freeze_heap = services is None
    if services is None:
        from shared.observability import configure_logging

        configure_logging()
    svc = services or Services.loaded(load_settings(ApiSettings))
    _ = svc.tools  # server tools (plugins included) register at start: a duplicate or broken one stops it here
    _ = svc.usage_reports  # built at start from LIMITS and MODEL_PRICES, parsed when the settings loaded
    app = FastAPI(
        title="Agent backend",
        version="1.0.0",
        description="AG-UI runs over SSE with a worker executor; see docs/protocols/agent.",
        lifespan=_lifespan(svc, freeze_heap=freeze_heap),
    )
    app.state.services = svc
    install_error_handlers(app)
    install_cors(app, svc.settings.cors_allowed_origins)
    app.add_middleware(TraceRequests)  # outermost: the request span covers CORS and the error handlers too
    app.add_api_route("/healthz", healthz, methods=["GET"], tags=["ops"])
    routers = (
        runs_router,
        threads_router,
        uploads_router,
        automations_router,
        memories_router,
        erasure_router,
        usage_router,
        webhooks_router,
    )
    for router in (*routers, feedback_export_router):
        app.include_router(router)
    if svc.settings.playground_enabled:
        app.include_router(playground_router)
    app.openapi = lambda: _openapi_with_run_input(app)  # type: ignore[method-assign]
    return app


def _openapi_with_run_input(app: FastAPI) -> dict[str, Any]:
    """The generated schema, plus the AG-UI ``RunAgentInput`` the streaming route reads by hand."""
    if app.openapi_schema is None:
        from ag_ui.core import RunAgentInput
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        run_input = RunAgentInput.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(run_input.pop("$defs", {}))
        components["RunAgentInput"] = run_input
        app.openapi_schema = schema
    return app.openapi_schema

"""Every route the app serves is routed by API Gateway, to the right function, and every route of the gateway is
served: template.yaml's ``Api`` events against the FastAPI app (its OpenAPI document, and the playground's page
routes, which the document leaves out).

A route the app serves with no event answers 403 ``Missing Authentication Token`` from API Gateway: nothing in the
app's own tests can see that. FastAPI's ``{param}`` and API Gateway's ``{param}`` are the same syntax; an event's
``{proxy+}`` is greedy and covers every path below it. SSE routes (``text/event-stream``) go on the streaming
function (Lambda Web Adapter, response streaming); every other route on the buffered function (Mangum).

Not routed, on purpose:

- the local runner's dev-token route (``devtools.local.dev_tokens``, ``make dev`` only): it mints tokens with a
  local secret, and ``create_app`` never includes it;
- FastAPI's own documentation routes (``/openapi.json``, ``/docs``, ``/redoc``): the API's reference is
  docs/protocols/agent, and the deployed stack publishes no schema page;
- the two routes that carry an attachment's bytes through the API (``GET .../messages/{messageId}/parts/{n}``,
  ``PUT /api/v1/uploads/{uploadId}``): they serve where the store makes no presigned URLs (``make dev``). On AWS every
  reader gets a presigned S3 GET (history, the messages snapshot) and an upload a presigned S3 PUT, so the bytes
  never pass through a function; a REST API without binary media types would base64 them anyway.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI

from functions.agent_api.app import create_app
from functions.agent_api.playground import page_router
from shared.wiring import Services
from tests.support.settings import make_settings

from . import template_checks as checks
from .test_memory_function_sizing import template

Route = tuple[str, str]  # (METHOD, path)
BYTES_ROUTES: frozenset[Route] = frozenset(
    {("GET", "/api/v1/threads/{threadId}/messages/{messageId}/parts/{n}"), ("PUT", "/api/v1/uploads/{uploadId}")}
)
"""Served by the app, deliberately not routed on AWS (the module docstring)."""
API_FUNCTIONS = ("StreamingApiFunction", "BufferedApiFunction")
GREEDY = "/{proxy+}"


@pytest.fixture(scope="module")
def app() -> FastAPI:
    # The playground's page routes exist when PlaygroundEnabled is "true"; the template routes them either way.
    return create_app(Services(make_settings(playground_enabled=True)))


def _sse(operation: dict[str, Any]) -> bool:
    return "text/event-stream" in operation.get("responses", {}).get("200", {}).get("content", {})


def app_routes(app: FastAPI) -> dict[Route, bool]:
    """Every (method, path) the app serves, and whether its answer is an SSE stream."""
    routes = {
        (method.upper(), path): _sse(operation)
        for path, operations in app.openapi()["paths"].items()
        for method, operation in operations.items()
    }
    # Left out of the document (include_in_schema=False): the playground's page and its files.
    for route in page_router.routes:
        for method in getattr(route, "methods", ()):
            if method != "HEAD":
                routes[(method, getattr(route, "path", ""))] = False
    return routes


def api_events() -> list[tuple[str, str, Route]]:
    """(function, event name, (METHOD, path)) of every ``Api`` event of template.yaml."""
    found = []
    for function_id in API_FUNCTIONS:
        events = template()["Resources"][function_id]["Properties"]["Events"]
        for name, event in events.items():
            if event["Type"] == "Api":
                properties = event["Properties"]
                found.append((function_id, name, (properties["Method"].upper(), properties["Path"])))
    return found


def covers(event: Route, route: Route) -> bool:
    """Whether API Gateway sends ``route`` to ``event``: the same method and path, or a greedy ``{proxy+}`` event
    above it. A REST API routes a path with a trailing slash as the path without it."""
    (event_method, event_path), (method, path) = event, route
    if event_method != method:
        return False
    path = path.rstrip("/") or "/"
    if event_path.endswith(GREEDY):
        return path.startswith(event_path.removesuffix(GREEDY) + "/")
    return event_path == path


def test_every_route_the_app_serves_has_exactly_one_event(app: FastAPI) -> None:
    events = api_events()
    problems = []
    for route in sorted(app_routes(app)):
        if route in BYTES_ROUTES:
            if any(covers(event, route) for _, _, event in events):
                problems.append(f"{route[0]} {route[1]}: routed, though AWS readers and uploads use presigned URLs")
            continue
        exact = [name for _, name, event in events if GREEDY not in event[1] and covers(event, route)]
        greedy = [name for _, name, event in events if GREEDY in event[1] and covers(event, route)]
        matched = exact or greedy  # API Gateway prefers a path's own resource to a greedy one above it
        if len(matched) != 1:
            problems.append(f"{route[0]} {route[1]}: {len(matched)} events {matched}")
    assert problems == []


def test_every_event_is_a_route_the_app_serves(app: FastAPI) -> None:
    served = app_routes(app)
    unserved = [
        f"{function_id}.{name}: {event[0]} {event[1]}"
        for function_id, name, event in api_events()
        if not any(covers(event, route) for route in served)
    ]
    assert unserved == []
    # One event per (method, path): API Gateway would refuse a second integration of the same method.
    pairs = [event for _, _, event in api_events()]
    assert len(pairs) == len(set(pairs))


def test_sse_routes_are_on_the_streaming_function_and_the_others_on_the_buffered_one(app: FastAPI) -> None:
    served = app_routes(app)
    misplaced = []
    for function_id, name, event in api_events():
        sse = any(served[route] for route in served if covers(event, route))
        wanted = "StreamingApiFunction" if sse else "BufferedApiFunction"
        if function_id != wanted:
            misplaced.append(f"{function_id}.{name}: {event[0]} {event[1]} belongs on {wanted}")
    assert misplaced == []
    # The gate's own list of SSE routes is the app's.
    sse_routes = {(path, method.lower()) for (method, path), sse in served.items() if sse}
    assert sse_routes == set(checks.SSE_ROUTES)


def test_the_dev_token_route_is_neither_served_by_the_app_nor_routed() -> None:
    from devtools.local.dev_tokens import dev_token_router

    dev_routes = {
        (method, getattr(route, "path", ""))
        for route in dev_token_router("a-local-secret").routes
        for method in getattr(route, "methods", ())
    }
    assert dev_routes  # the route exists, in the local runner only
    app = create_app(Services(make_settings(playground_enabled=True)))
    assert not dev_routes & set(app_routes(app))
    assert not [name for _, name, event in api_events() for route in dev_routes if covers(event, route)]

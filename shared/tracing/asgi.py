"""The HTTP request span, parent of the run's span, and the flush that makes a run's spans leave before Lambda
freezes the environment.

A pure ASGI middleware (nothing of Starlette), installed on the app whatever the settings; with traces off it only
passes the call through. With traces on:

- the request span (kind server) is a child of the client's W3C ``traceparent`` (and ``tracestate``) when the
  request has one, so a browser or a calling service sees our spans inside its own trace;
- it ends, and every ended span of the process is exported (bounded: ``shared.tracing.otel.FLUSH_TIMEOUT_S``),
  *before* the response's last message goes to the server: on Lambda the invocation ends with the response, and the
  environment may be frozen the moment it does (docs/reliability.md §5a). A run's spans all end before its terminal
  event (``shared.tracing.runs``), which comes before the response's end, so they leave with this flush;
- the request's headers are never recorded (they carry the bearer token); the API Gateway request id is, so that an
  access log line and a trace meet.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from shared.tracing.api import Span, error_type, tracer

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def api_gateway_request_id(scope: Scope) -> str | None:
    """API Gateway's request id: from the Web Adapter's ``x-amzn-request-context`` header, or Mangum's event."""
    raw = _header(scope, b"x-amzn-request-context")
    context: Any = None
    if raw:
        try:
            context = json.loads(raw)
        except ValueError:
            context = None
    elif isinstance(scope.get("aws.event"), dict):
        context = scope["aws.event"].get("requestContext")
    request_id = context.get("requestId") if isinstance(context, dict) else None
    return request_id if isinstance(request_id, str) else None


UNTRACED_PATHS = frozenset({"/healthz"})
"""The Web Adapter's readiness check: polled at every start-up, it would fill a trace backend with nothing."""
UNSAMPLED_PARENT = "00-00000000000000000000000000000001-0000000000000001-00"
"""A ``traceparent`` that asks not to be sampled: the app's requests to itself at start-up carry it, so they run the
traced path (its imports) without exporting a span."""


def xray_trace_id(scope: Scope) -> str | None:
    """The X-Ray trace id API Gateway gave the request (``X-Amzn-Trace-Id: Root=1-...``): its access log's
    ``traceId``."""
    header = _header(scope, b"x-amzn-trace-id") or ""
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == "Root" and value:
            return value
    return None


class TraceRequests:
    """ASGI middleware: one server span per HTTP request, exported before the response ends."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        current = tracer()
        if scope.get("type") != "http" or not current.enabled or scope.get("path") in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        method = str(scope.get("method", "GET"))
        attributes = {
            "http.request.method": method,
            "url.path": str(scope.get("path", "")),
            "aws.api_gateway.request_id": api_gateway_request_id(scope),
            "aws.xray.trace_id": xray_trace_id(scope),
        }
        with current.remote_parent(_header(scope, b"traceparent"), _header(scope, b"tracestate")):
            span = current.start(method, attributes, kind="server")
        ended = False

        async def end() -> None:
            nonlocal ended
            if not ended:
                ended = True
                _name_after_route(span, scope, method)
                span.end()
                await current.flush()

        async def traced_send(message: Message) -> None:
            if message.get("type") == "http.response.start":
                status = int(message.get("status", 0))
                span.set("http.response.status_code", status)
                if status >= 500:
                    span.fail(str(status))
            elif message.get("type") == "http.response.body" and not message.get("more_body", False):
                await end()
            await send(message)

        try:
            with current.activate(span):
                await self.app(scope, receive, traced_send)
        except BaseException as exc:
            span.fail(error_type(exc))
            raise
        finally:
            await end()


def _name_after_route(span: Span, scope: Scope, method: str) -> None:
    """``{method} {route}`` once routing has matched (the route template, never the path with its ids)."""
    route = getattr(scope.get("route"), "path", None)
    if isinstance(route, str):
        span.set("http.route", route)
        span.rename(f"{method} {route}")

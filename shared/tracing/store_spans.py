"""DynamoDB and Redis calls as child spans of whatever span is current (the run's, its admission's, a request's):
where a run's time goes between its model turns.

Imported only when traces are on (the composition root asks ``tracer().enabled`` when it builds the DynamoDB client
and the run service): with traces off nothing here is imported, no hook is registered and no call is wrapped, so the
store and the stream cost exactly what they cost without it (``tests/unit/test_store_spans.py``).

Why not OpenTelemetry's botocore and redis instrumentations: they are not in the locked dependencies (three more
distributions in every function's package, each patching its library globally when instrumented), and both are
easy to do here with what we have:

- **DynamoDB**: botocore's own event hooks on the process's one client (:func:`trace_botocore`): a span from the
  request's parameters (``provide-client-params``) to its parsed response (``after-call``) or its transport failure
  (``after-call-error``), retries inside it. boto3 calls run in a worker thread (``asyncio.to_thread``), which
  carries the caller's context, so the span's parent is the caller's current span.
- **Redis**: the run path's event stream is wrapped (:func:`traced_stream`): each call of the adapter (one command
  or one pipeline) is one span, named after the Redis command it sends.

Only inside a trace: a call made while no span is current (the start-up's connections, the migration status's
read, a sweep) makes no span, so it never starts a trace of one span.

Names and attributes follow the OpenTelemetry database conventions (``db.system.name``, ``db.operation.name``, for
DynamoDB also ``rpc.*`` and ``aws.dynamodb.table_names``); never a key or an item (keys name tenants and threads).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import trace

from shared.tracing.api import Span, Tracer, error_type, tracer

_SPAN = "agent.trace.span"
"""Where a DynamoDB call's span waits in botocore's per-request context between the hooks."""

REDIS_COMMANDS = {
    "append": "XADD",
    "append_batch": "XADD",
    "read_after": "XREAD",
    "oldest_id": "XRANGE",
    "expire": "EXPIRE",
    "delete": "DEL",
    "ping": "PING",
}
"""The Redis command each method of the event stream adapter sends (``append_batch``: one pipeline of them); a
method not named here is a span named after the method."""


def trace_botocore(client: Any) -> None:
    """Make every call of ``client`` (a boto3 client, possibly behind a proxy) a client span."""
    events = client.meta.events
    service = client.meta.service_model.service_id.hyphenize()
    events.register(f"provide-client-params.{service}", _start_call)
    events.register(f"after-call.{service}", _end_call)
    events.register(f"after-call-error.{service}", _fail_call)


def _in_a_trace() -> Tracer | None:
    """The tracer, when a span is current: a call outside any (the start-up's connections, the migration status's
    read) starts no trace of its own, which would be a trace of one span nobody asked for."""
    current = tracer()
    if not current.enabled or not trace.get_current_span().get_span_context().is_valid:
        return None
    return current


def _start_call(params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
    current = _in_a_trace()
    if current is None:
        return
    operation = model.name
    tables = _table_names(params)
    context[_SPAN] = current.start(
        f"{operation} {tables[0]}" if len(tables) == 1 else operation,
        {
            "db.system.name": "aws.dynamodb",
            "db.operation.name": operation,
            "rpc.system": "aws-api",
            "rpc.service": "DynamoDB",
            "rpc.method": operation,
            "aws.dynamodb.table_names": tables or None,
            "aws.dynamodb.index_name": params.get("IndexName"),
        },
        kind="client",
    )


def _end_call(parsed: dict[str, Any], context: dict[str, Any], http_response: Any = None, **_: Any) -> None:
    span: Span | None = context.pop(_SPAN, None)
    if span is None:
        return
    status = getattr(http_response, "status_code", 200)
    if status >= 300:
        span.fail(str(parsed.get("Error", {}).get("Code") or status))
    span.end()


def _fail_call(exception: BaseException, context: dict[str, Any], **_: Any) -> None:
    span: Span | None = context.pop(_SPAN, None)
    if span is not None:
        span.fail(error_type(exception))
        span.end()


def _table_names(params: dict[str, Any]) -> list[str]:
    """The tables a call names: its ``TableName``, or those of a batch or a transaction."""
    if "TableName" in params:
        return [str(params["TableName"])]
    names = set(params.get("RequestItems", {}))
    for entry in params.get("TransactItems", ()):
        names |= {body.get("TableName", "") for body in entry.values() if isinstance(body, dict)}
    return sorted(name for name in names if name)


class TracedStream:
    """The event stream with one client span per call (the module docstring says why): every attribute of the
    wrapped stream is reachable, so the run path's ``isinstance`` checks (``ProbedStream``...) answer as for it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._stream, name)
        if not inspect.iscoroutinefunction(attr):
            return attr
        return _spanned(attr, REDIS_COMMANDS.get(name, name))


def _spanned(method: Callable[..., Awaitable[Any]], command: str) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        current = _in_a_trace()
        if current is None:
            return await method(*args, **kwargs)
        span = current.start(command, {"db.system.name": "redis", "db.operation.name": command}, kind="client")
        try:
            with current.activate(span):
                return await method(*args, **kwargs)
        except Exception as exc:  # a cancelled read (the response went away) is not a failure
            span.fail(error_type(exc))
            raise
        finally:
            span.end()

    return call


def traced_stream(stream: Any) -> Any:
    """``stream`` with a span per call (typed as what it wraps: the wrapper answers every attribute it has)."""
    return TracedStream(stream)

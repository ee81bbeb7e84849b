"""The tracer of ``shared.tracing.api`` on the OpenTelemetry SDK, exporting over OTLP/HTTP (protobuf).

Imported only by ``shared.tracing.setup`` when an OTLP endpoint is configured: this is the module that brings the
SDK (and the exporter, with ``requests`` and ``protobuf``) into a process. Everything but the endpoint check is the
SDK's own reading of the standard variables: ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` / ``_HEADERS`` / ``_TIMEOUT``,
``OTEL_SERVICE_NAME``, ``OTEL_TRACES_SAMPLER`` / ``_ARG``, ``OTEL_BSP_*``.

Spans go to a ``BatchSpanProcessor`` (its thread exports in the background, never on the event loop); ``flush``
exports what is left, in a worker thread, bounded by ``FLUSH_TIMEOUT_S``: the HTTP layer calls it before the last
byte of a response and the Lambda handlers before they return (Lambda may freeze the environment right after).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from shared.tracing.api import Attributes, AttributeValue, Span, SpanKind

FLUSH_TIMEOUT_S = 2.0
"""The most a flush waits for the export before the response's last byte (docs/observability.md, "Traces")."""
DEFAULT_SERVICE_NAME = "agent-backend"

_KINDS = {"internal": trace.SpanKind.INTERNAL, "server": trace.SpanKind.SERVER, "client": trace.SpanKind.CLIENT}
_PROPAGATOR = TraceContextTextMapPropagator()


def _clean(attributes: Attributes | None) -> dict[str, Any]:
    if not attributes:
        return {}
    return {k: _value(v) for k, v in attributes.items() if v is not None}


def _value(value: AttributeValue) -> Any:
    return value if isinstance(value, str | bool | int | float) else [str(v) for v in value]


def span_context_of(traceparent: str) -> SpanContext | None:
    """The span a W3C ``traceparent`` names (remote), or None when it is not a valid one."""
    parent = trace.get_current_span(_PROPAGATOR.extract({"traceparent": traceparent})).get_span_context()
    return parent if parent.is_valid else None


class OtelSpan:
    """``shared.tracing.api.Span`` over an SDK span; ends once."""

    def __init__(self, span: trace.Span) -> None:
        self.otel = span
        self._ended = False

    def set(self, key: str, value: AttributeValue | None) -> None:
        if value is not None:
            self.otel.set_attribute(key, _value(value))

    def rename(self, name: str) -> None:
        self.otel.update_name(name)

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        self.otel.add_event(name, _clean(attributes))

    def link(self, traceparent: str, attributes: Attributes | None = None) -> None:
        linked = span_context_of(traceparent)
        if linked is not None:
            self.otel.add_link(linked, _clean(attributes))

    def fail(self, error_type: str, description: str | None = None) -> None:
        self.otel.set_attribute("error.type", error_type)
        self.otel.set_status(Status(StatusCode.ERROR, description))

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self.otel.end()

    @property
    def traceparent(self) -> str | None:
        ctx = self.otel.get_span_context()
        if not ctx.is_valid:
            return None
        return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


class OtelTracer:
    """``shared.tracing.api.Tracer`` on an SDK ``TracerProvider``."""

    enabled = True

    def __init__(self, provider: TracerProvider, *, capture_content: bool, flush_timeout_s: float = FLUSH_TIMEOUT_S):
        self.provider = provider
        self.capture_content = capture_content
        self._flush_timeout_s = flush_timeout_s
        self._tracer = provider.get_tracer("agent-backend")

    def start(
        self, name: str, attributes: Attributes | None = None, *, kind: SpanKind = "internal", root: bool = False
    ) -> Span:
        parent = otel_context.Context() if root else None
        return OtelSpan(self._tracer.start_span(name, context=parent, kind=_KINDS[kind], attributes=_clean(attributes)))

    def activate(self, span: Span) -> AbstractContextManager[None]:
        return _activated(span.otel if isinstance(span, OtelSpan) else None)

    def remote_parent(self, traceparent: str | None, tracestate: str | None) -> AbstractContextManager[None]:
        return _remote(traceparent, tracestate)

    async def flush(self) -> bool:
        """Export every ended span now (in a worker thread); False when the export did not finish in time."""
        timeout_ms = int(self._flush_timeout_s * 1000)
        return await asyncio.to_thread(self.provider.force_flush, timeout_ms)

    def shutdown(self) -> None:
        self.provider.shutdown()


@contextmanager
def _activated(span: trace.Span | None) -> Iterator[None]:
    if span is None:
        yield
        return
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        otel_context.detach(token)


@contextmanager
def _remote(traceparent: str | None, tracestate: str | None) -> Iterator[None]:
    linked = span_context_of(traceparent) if traceparent else None
    if linked is None:
        yield
        return
    if tracestate:
        carrier = {"traceparent": traceparent or "", "tracestate": tracestate}
        linked = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(linked)))
    try:
        yield
    finally:
        otel_context.detach(token)


def build_tracer(
    *,
    capture_content: bool,
    service_name: str | None = None,
    endpoint: str | None = None,
    exporter: SpanExporter | None = None,
    processor: SpanProcessor | None = None,
    flush_timeout_s: float = FLUSH_TIMEOUT_S,
) -> OtelTracer:
    """A tracer exporting over OTLP/HTTP to ``endpoint`` (the full traces URL), with the headers and timeout the
    standard variables give (tests pass their own exporter or processor). ``service_name``: ``OTEL_SERVICE_NAME``;
    without it, ``agent-backend``."""
    resource = Resource.create({"service.name": service_name or DEFAULT_SERVICE_NAME})
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER / _ARG, read by the SDK
    if processor is None:
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=endpoint)  # headers, timeout: from the standard variables
        processor = BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return OtelTracer(provider, capture_content=capture_content, flush_timeout_s=flush_timeout_s)

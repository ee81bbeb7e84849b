"""Traces in tests: the SDK's in-memory exporter installed as the process's tracer, and a real OTLP/HTTP receiver
that decodes what an exporter sends with ``opentelemetry-proto`` (the protobuf the collectors speak)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared.tracing.api import install
from shared.tracing.otel import OtelTracer, build_tracer


@contextmanager
def in_memory_traces(*, capture_content: bool = False) -> Iterator[InMemorySpanExporter]:
    """The process's tracer exports to memory, span by span, for the block; the previous one is put back."""
    exporter = InMemorySpanExporter()
    built: OtelTracer = build_tracer(capture_content=capture_content, processor=SimpleSpanProcessor(exporter))
    previous = install(built)
    try:
        yield exporter
    finally:
        install(previous)
        built.shutdown()


def by_name(spans: Any) -> dict[str, ReadableSpan]:
    """The spans by name (the last of each name)."""
    return {s.name: s for s in spans}


def parent_name(span: ReadableSpan, spans: Any) -> str | None:
    if span.parent is None:
        return None
    ids: dict[int, str] = {s.context.span_id: s.name for s in spans}
    return ids.get(span.parent.span_id, "(remote)")


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    links: list[tuple[str, str]]


@dataclass
class OtlpReceiver:
    """An OTLP/HTTP traces endpoint on loopback (``/v1/traces``, protobuf), keeping every span it decoded."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def take(self, body: bytes) -> None:
        self.raw.append(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: _any_value(a.value) for a in span.attributes},
                            links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        )
                    )


def _any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.path == "/v1/traces":
                receiver.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()

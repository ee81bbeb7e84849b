"""The tracing interface the run path calls, its no-op default, and the process's tracer.

Why not call OpenTelemetry directly: with no OTLP endpoint configured, nothing of the OpenTelemetry SDK may be
imported (the entry imports must cost what they cost without traces, docs/observability.md "Traces"), and the run
path must read the same either way. So the run path calls this small interface; the default does nothing, and
``shared.tracing.setup`` installs the SDK-backed tracer (``shared.tracing.otel``) only when an endpoint is set. Like
OpenTelemetry's own global tracer provider, the tracer is one per process, installed once by the composition root.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Literal, Protocol

AttributeValue = str | bool | int | float | Sequence[str]
Attributes = Mapping[str, AttributeValue | None]
SpanKind = Literal["internal", "server", "client"]


class Span(Protocol):
    """One span: attributes (``None`` values are left out), events, links, the error type, its end (once)."""

    def set(self, key: str, value: AttributeValue | None) -> None: ...

    def rename(self, name: str) -> None: ...

    def event(self, name: str, attributes: Attributes | None = None) -> None: ...

    def link(self, traceparent: str, attributes: Attributes | None = None) -> None: ...

    def fail(self, error_type: str, description: str | None = None) -> None: ...

    def end(self) -> None: ...

    @property
    def traceparent(self) -> str | None: ...


class Tracer(Protocol):
    """Starts spans under the current one (or a new trace: ``root``), makes one current, flushes the export."""

    enabled: bool
    capture_content: bool
    """``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``: message text, tool arguments and results."""

    def start(
        self, name: str, attributes: Attributes | None = None, *, kind: SpanKind = "internal", root: bool = False
    ) -> Span: ...

    def activate(self, span: Span) -> AbstractContextManager[None]: ...

    def remote_parent(self, traceparent: str | None, tracestate: str | None) -> AbstractContextManager[None]: ...

    async def flush(self) -> bool: ...


class _NoSpan:
    traceparent: str | None = None

    def set(self, key: str, value: AttributeValue | None) -> None:
        pass

    def rename(self, name: str) -> None:
        pass

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        pass

    def link(self, traceparent: str, attributes: Attributes | None = None) -> None:
        pass

    def fail(self, error_type: str, description: str | None = None) -> None:
        pass

    def end(self) -> None:
        pass


NO_SPAN: Span = _NoSpan()


class _NoTracer:
    enabled = False
    capture_content = False

    def start(
        self, name: str, attributes: Attributes | None = None, *, kind: SpanKind = "internal", root: bool = False
    ) -> Span:
        return NO_SPAN

    def activate(self, span: Span) -> AbstractContextManager[None]:
        return nullcontext()

    def remote_parent(self, traceparent: str | None, tracestate: str | None) -> AbstractContextManager[None]:
        return nullcontext()

    async def flush(self) -> bool:
        return True


NO_TRACER: Tracer = _NoTracer()
_installed: list[Tracer] = [NO_TRACER]


def tracer() -> Tracer:
    """The process's tracer: the no-op one unless ``install`` put another in place."""
    return _installed[0]


def install(new: Tracer) -> Tracer:
    """Make ``new`` the process's tracer; returns the one it replaces (tests put it back)."""
    previous, _installed[0] = _installed[0], new
    return previous


def error_type(exc: BaseException) -> str:
    """``error.type`` of a failure: our error code when it has one (``model_timeout``), else the class name."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code else type(exc).__name__


@contextmanager
def span(name: str, attributes: Attributes | None = None, *, kind: SpanKind = "internal") -> Iterator[Span]:
    """A span around a block, current inside it, with the error type of what the block raised."""
    current = _installed[0]
    if not current.enabled:
        yield NO_SPAN
        return
    started = current.start(name, attributes, kind=kind)
    try:
        with current.activate(started):
            yield started
    except BaseException as exc:
        started.fail(error_type(exc))
        raise
    finally:
        started.end()

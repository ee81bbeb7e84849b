"""Traces of every run, by hand, under the OpenTelemetry GenAI semantic conventions (docs/observability.md).

- ``api``: the interface the run path calls, a no-op default, the process's tracer (no OpenTelemetry import);
- ``runs``: the root span of a run (``invoke_agent``), its outcome, the links of memory and automation runs;
- ``genai``: the spans of model turns (``chat``) and tool calls (``execute_tool``), content opt-in;
- ``asgi``: the HTTP request span (a client's ``traceparent`` honoured), flushed before the response's last byte;
- ``setup``: the tracer the settings ask for; it imports ``otel`` (the SDK) only when an endpoint is set.
"""

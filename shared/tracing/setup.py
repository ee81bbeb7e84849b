"""The process's tracer from the settings: off (nothing of OpenTelemetry imported) unless an OTLP endpoint is set.

Only the endpoint, the protocol and the content switch are read here (``Settings``); the OpenTelemetry SDK reads the
other standard variables itself (headers, timeout, sampler, batch sizes). Installed once per process: the first
configuration with an endpoint wins, as OpenTelemetry's global provider does.
"""

from __future__ import annotations

import logging
import sys

from shared.settings import Settings
from shared.tracing.api import Tracer, install, tracer

logger = logging.getLogger(__name__)

SUPPORTED_PROTOCOL = "http/protobuf"


def traces_endpoint(settings: Settings) -> str | None:
    """Where spans are posted: the traces endpoint as given, or the base endpoint with ``/v1/traces`` (as the OTLP
    exporter specification says for the generic variable); None when neither is set."""
    if settings.otel_exporter_otlp_traces_endpoint:
        return settings.otel_exporter_otlp_traces_endpoint
    if settings.otel_exporter_otlp_endpoint:
        return settings.otel_exporter_otlp_endpoint.rstrip("/") + "/v1/traces"
    return None


def keep_redis_from_importing_the_metrics_sdk() -> None:
    """redis-py imports OpenTelemetry's metrics SDK as it is imported, whenever the SDK is installed (for its optional
    command metrics, which nothing here turns on): with the SDK shipped for traces, that would be part of every cold
    start, traces on or off (docs/observability.md, "What it costs"). A module set to None in ``sys.modules`` fails to
    import, so redis-py finds the SDK "not installed". The traces need only the SDK's trace part."""
    if "opentelemetry.sdk.metrics" not in sys.modules:
        sys.modules["opentelemetry.sdk.metrics"] = None  # type: ignore[assignment]


def configure_tracing(settings: Settings) -> Tracer:
    """The tracer the settings ask for, installed as the process's; the no-op one when traces are off. Runs first in
    the warm-up, before the Redis client is built (``keep_redis_from_importing_the_metrics_sdk``)."""
    keep_redis_from_importing_the_metrics_sdk()
    current = tracer()
    if current.enabled:
        return current
    endpoint = traces_endpoint(settings)
    if endpoint is None:
        return current
    protocol = settings.otel_exporter_otlp_traces_protocol or settings.otel_exporter_otlp_protocol
    if protocol and protocol != SUPPORTED_PROTOCOL:
        logger.error("traces stay off: only OTLP over http/protobuf is supported", extra={"protocol": protocol})
        return current
    from shared.tracing.otel import build_tracer

    built = build_tracer(
        capture_content=settings.otel_instrumentation_genai_capture_message_content,
        service_name=settings.otel_service_name,
        endpoint=endpoint,
    )
    install(built)
    logger.info("traces on", extra={"capture_content": built.capture_content})
    return built

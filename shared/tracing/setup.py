"""The process's tracer from the settings: off (nothing of OpenTelemetry imported) unless an OTLP endpoint is set.

Only the endpoint, the protocol and the content switch are read here (``Settings``); the OpenTelemetry SDK reads the
other standard variables itself (headers, timeout, sampler, batch sizes). Installed once per process: the first
configuration with an endpoint wins, as OpenTelemetry's global provider does.
"""

from __future__ import annotations

import logging

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


def configure_tracing(settings: Settings) -> Tracer:
    """The tracer the settings ask for, installed as the process's; the no-op one when traces are off."""
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

"""Structured logs and per-run metrics with Powertools (names documented in docs/observability.md).

Metrics are written as CloudWatch embedded metric format on stdout, one document per run, which works the same in
the streaming function (uvicorn under the Web Adapter, not a Lambda handler) and in the handler functions. The
alarms in template.yaml are built on these names; change them together.

Each run document carries its figures under three dimension sets: ``service`` (what the alarms watch),
``service, profile`` (every profile's quality and cost side by side) and, for a run a ramp covered,
``service, rollout, side`` (the two sides of one ramp, on the same population of users; docs/policy.md §1.5).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from shared.models import ExecutorKind, RunStatus

if TYPE_CHECKING:
    from shared.executors.context import RunContext
    from shared.run_results import ExecutionResult

NAMESPACE_DEFAULT = "AgentBackend"
SERVICE_DEFAULT = "agent-backend"

# Metric names (the template's alarms and dashboard use these).
RUN_ERRORS = "RunErrors"
RUN_DURATION_MS = "RunDurationMs"
TIME_TO_FIRST_EVENT_MS = "TimeToFirstEventMs"
INPUT_TOKENS = "InputTokens"
OUTPUT_TOKENS = "OutputTokens"
TOOL_REFUSALS = "ToolRefusals"
WINDOW_REPAIRS = "WindowRepairs"
MEMORY_REJECTIONS = "MemoryRejections"
RUNS_SWEPT = "RunsSwept"
RUNTIME_CONFIG_REJECTED = "RuntimeConfigRejected"
RUNTIME_CONFIG_UNAVAILABLE = "RuntimeConfigUnavailable"

logger = logging.getLogger(__name__)


def configure_logging(level: str | None = None) -> None:
    """JSON logs for every stdlib logger of the package (message text never logged at info level)."""
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

    root = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", SERVICE_DEFAULT), level=level)
    copy_config_to_registered_loggers(source_logger=root, include={"shared", "functions"})


def run_metrics(ctx: RunContext, status: RunStatus, result: ExecutionResult) -> dict[str, float]:
    """The figures one run contributes, by metric name (input/output tokens are the run's totals)."""
    figures: dict[str, float] = {
        RUN_ERRORS: 1.0 if status is RunStatus.FAILED else 0.0,
        RUN_DURATION_MS: round(result.duration_ms, 1),
        INPUT_TOKENS: float(sum(u.input_tokens for u in result.usage)),
        OUTPUT_TOKENS: float(sum(u.output_tokens for u in result.usage)),
        TOOL_REFUSALS: float(result.tool_refusals),
        WINDOW_REPAIRS: float(result.window_repairs),
    }
    if result.time_to_first_event_ms is not None:
        figures[TIME_TO_FIRST_EVENT_MS] = round(result.time_to_first_event_ms, 1)
    if ctx.meta.executor is ExecutorKind.MEMORY:
        figures[MEMORY_REJECTIONS] = float(result.memory_rejections)
    return figures


def run_dimension_sets(ctx: RunContext, service: str) -> list[dict[str, str]]:
    """The dimension sets a run's figures are published under besides ``service`` alone: per profile, and per ramp
    side when a ramp covered the run."""
    sets = [{"service": service, "profile": ctx.profile.name}]
    if ctx.meta.rollout_id is not None and ctx.meta.rollout_side is not None:
        sets.append({"service": service, "rollout": ctx.meta.rollout_id, "side": ctx.meta.rollout_side})
    return sets


async def emit_run_metrics(ctx: RunContext, status: RunStatus, result: ExecutionResult) -> None:
    """Flush one EMF document for the run. Its first dimension set is ``service`` alone (the template's alarms
    are on it); the others are :func:`run_dimension_sets`. Run id, executor and models travel as metadata."""
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit

    service = os.environ.get("POWERTOOLS_SERVICE_NAME", SERVICE_DEFAULT)
    metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", NAMESPACE_DEFAULT), service=service)
    for name, value in run_metrics(ctx, status, result).items():
        unit = MetricUnit.Milliseconds if name.endswith("Ms") else MetricUnit.Count
        metrics.add_metric(name=name, unit=unit, value=value)
    for dimensions in run_dimension_sets(ctx, service):
        metrics.add_dimensions(**dimensions)
    metrics.add_metadata(key="run_id", value=ctx.run_id)
    metrics.add_metadata(key="executor", value=ctx.meta.executor.value)
    metrics.add_metadata(key="models", value=run_models(result))
    metrics.flush_metrics()


def emit_swept_runs(count: int) -> None:
    """``RunErrors`` (and ``RunsSwept``) for runs the sweeper ended.

    A run whose process was killed (Lambda timeout, out of memory) never reaches ``emit_run_metrics``, so without this
    the ``RunErrors`` alarm would miss exactly the worst failures. Same namespace and ``service`` dimension.
    """
    if count <= 0:
        return
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit

    metrics = Metrics(
        namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", NAMESPACE_DEFAULT),
        service=os.environ.get("POWERTOOLS_SERVICE_NAME", SERVICE_DEFAULT),
    )
    metrics.add_metric(name=RUN_ERRORS, unit=MetricUnit.Count, value=count)
    metrics.add_metric(name=RUNS_SWEPT, unit=MetricUnit.Count, value=count)
    metrics.add_metadata(key="source", value="sweeper")
    metrics.flush_metrics()


def emit_runtime_config_problem(metric: str, *, version: str) -> None:
    """One count of ``RuntimeConfigRejected`` (a document that failed its checks was kept out) or
    ``RuntimeConfigUnavailable`` (the configuration could not be read), on the ``service`` dimension; the
    configuration version travels as metadata. The last good configuration stays in use either way."""
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit

    metrics = Metrics(
        namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", NAMESPACE_DEFAULT),
        service=os.environ.get("POWERTOOLS_SERVICE_NAME", SERVICE_DEFAULT),
    )
    metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
    metrics.add_metadata(key="configuration_version", value=version)
    metrics.flush_metrics()


def run_models(result: ExecutionResult) -> list[dict[str, str | None]]:
    """The models a run called: the profile's logical id and the id the provider was sent (``MODEL_ID_MAP``)."""
    seen: dict[tuple[str, str | None], dict[str, str | None]] = {}
    for usage in result.usage:
        seen.setdefault(
            (usage.model, usage.provider_model), {"model": usage.model, "providerModel": usage.provider_model}
        )
    return list(seen.values())

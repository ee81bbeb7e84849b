"""The limits' metrics, in the namespace and ``service`` dimension of every other metric (docs/observability.md).

- ``LimitRefusals`` (dimensions ``service``, ``limit``): a run refused over a limit, by limit kind
  (``concurrentRuns``, ``runsPerMinute``, ``tokensPerDay``, ``tokensPerMonth``); the scope travels as metadata.
- ``MemoryExtractionsDeferred`` and ``AutomationFiresSkipped`` (dimension ``service``): work over a token budget
  put off (memory) or skipped (an automation's fire).
"""

from __future__ import annotations

import os

LIMIT_REFUSALS = "LimitRefusals"
MEMORY_EXTRACTIONS_DEFERRED = "MemoryExtractionsDeferred"
AUTOMATION_FIRES_SKIPPED = "AutomationFiresSkipped"


def emit_limit_metric(metric: str, *, limit: str, scope: str) -> None:
    """One count of ``metric`` with the limit kind as a dimension (for ``LimitRefusals``) and the scope as
    metadata."""
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit

    metrics = Metrics(
        namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "AgentBackend"),
        service=os.environ.get("POWERTOOLS_SERVICE_NAME", "agent-backend"),
    )
    if metric == LIMIT_REFUSALS:
        metrics.add_dimension(name="limit", value=limit)
    metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
    metrics.add_metadata(key="scope", value=scope)
    metrics.flush_metrics()

"""Which tenants this stack serves (``SERVED_TENANTS``), and the one refusal and one metric for the others.

A deployment can be one of several stacks that split the tenants between them (docs/scaling.md §2): each stack's
table and stream hold only its own tenants. A token or an event of a tenant that another stack serves is refused
here, right after the token is verified (``shared.auth``) or the event is parsed, before anything is read or
written, so a misrouted caller can never create that tenant's data on the wrong stack.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from shared.errors import NotFound

ALL_TENANTS = "*"
TENANT_NOT_SERVED = "tenant_not_served"
UNSERVED_TENANT_EVENTS_DROPPED = "UnservedTenantEventsDropped"
"""The metric (dimensions ``service``, ``source``) counting automation fires and memory events dropped because
their tenant is not served here."""


class ServedTenants:
    """The tenants a stack serves: every tenant (``*``, the default) or the listed ones."""

    __slots__ = ("_names",)

    def __init__(self, names: Iterable[str]) -> None:
        listed = frozenset(names)
        self._names: frozenset[str] | None = None if ALL_TENANTS in listed else listed

    @property
    def everyone(self) -> bool:
        return self._names is None

    def serves(self, tenant_id: str) -> bool:
        return self._names is None or tenant_id in self._names

    def check(self, tenant_id: str) -> None:
        """Raises ``NotFound`` (``tenant_not_served``) for a tenant this stack does not serve: a 404, as for
        anything else that is not here."""
        if not self.serves(tenant_id):
            raise NotFound("this tenant is not served here", code="tenant_not_served")


def count_dropped_event(source: str) -> None:
    """One count of ``UnservedTenantEventsDropped`` with ``source`` (``memory``, ``automation``) as a dimension,
    in the namespace and ``service`` dimension of every other metric. The tenant is not a dimension (one metric
    series per tenant would cost per tenant): it is in the log line beside it."""
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit

    metrics = Metrics(
        namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "AgentBackend"),
        service=os.environ.get("POWERTOOLS_SERVICE_NAME", "agent-backend"),
    )
    metrics.add_dimension(name="source", value=source)
    metrics.add_metric(name=UNSERVED_TENANT_EVENTS_DROPPED, unit=MetricUnit.Count, value=1)
    metrics.flush_metrics()

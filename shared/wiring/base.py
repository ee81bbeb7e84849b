"""What every group of providers stands on: the settings (with their structured ones parsed), the overrides, and the
process's one DynamoDB client."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Self

from shared.settings import Settings
from shared.tenancy import ServedTenants
from shared.tracing.api import tracer
from shared.wiring.overrides import ServiceOverrides
from shared.wiring.settings import LoadedSettings, StructuredSettings, parse_structured_settings

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class ProviderBase:
    """The settings and overrides one process was built from. One per process (per Lambda container).

    The providers build from ``structured`` (``LIMITS``, ``MCP_SERVERS``... already parsed), never from the text of
    those settings. It comes from :func:`~shared.wiring.settings.load_settings` (:meth:`loaded`); given only
    ``settings`` (tests, tools that build their own), they are parsed here, once, as loading would."""

    def __init__(
        self,
        settings: Settings,
        overrides: ServiceOverrides | None = None,
        *,
        structured: StructuredSettings | None = None,
    ) -> None:
        if overrides is not None and not isinstance(overrides, ServiceOverrides):
            raise TypeError(f"overrides must be a ServiceOverrides, not {type(overrides).__name__}")
        self.settings = settings
        self.structured = structured if structured is not None else parse_structured_settings(settings)
        self.overrides = overrides if overrides is not None else ServiceOverrides()

    @classmethod
    def loaded(cls, loaded: LoadedSettings, overrides: ServiceOverrides | None = None) -> Self:
        """The providers of settings as :func:`~shared.wiring.settings.load_settings` loaded them (parsed there)."""
        return cls(loaded.settings, overrides, structured=loaded.structured)

    @cached_property
    def served_tenants(self) -> ServedTenants:
        """``SERVED_TENANTS``: the token check, the memory function and the automation function refuse the others."""
        return ServedTenants(self.settings.served_tenants)

    @cached_property
    def dynamodb_client(self) -> DynamoDBClient:
        """The process's one DynamoDB client: every adapter of the main table, the migration runner and the memory
        function's idempotency records use it (built on first use, then shared)."""
        from shared.adapters.aws.clients import client_factory

        settings = self.settings
        make = client_factory("dynamodb", region=settings.aws_region, endpoint_url=settings.dynamodb_endpoint_url)
        client: DynamoDBClient = make()
        if tracer().enabled:  # its calls as spans; with traces off nothing is imported or registered
            from shared.tracing.store_spans import trace_botocore

            trace_botocore(client)
        return client

    def _dynamodb(self) -> DynamoDBClient:
        """The factory every table adapter is given: it hands out :attr:`dynamodb_client`."""
        return self.dynamodb_client

"""What every group of providers stands on: the settings, the overrides, and the process's one DynamoDB client."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from shared.settings import Settings
from shared.wiring.overrides import ServiceOverrides

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class ProviderBase:
    """The settings and overrides one process was built from. One per process (per Lambda container)."""

    def __init__(self, settings: Settings, overrides: ServiceOverrides | None = None) -> None:
        if overrides is not None and not isinstance(overrides, ServiceOverrides):
            raise TypeError(f"overrides must be a ServiceOverrides, not {type(overrides).__name__}")
        self.settings = settings
        self.overrides = overrides if overrides is not None else ServiceOverrides()

    @cached_property
    def dynamodb_client(self) -> DynamoDBClient:
        """The process's one DynamoDB client: every adapter of the main table, the migration runner and the memory
        function's idempotency records use it (built on first use, then shared)."""
        from shared.adapters.aws.clients import client_factory

        settings = self.settings
        make = client_factory("dynamodb", region=settings.aws_region, endpoint_url=settings.dynamodb_endpoint_url)
        client: DynamoDBClient = make()
        return client

    def _dynamodb(self) -> DynamoDBClient:
        """The factory every table adapter is given: it hands out :attr:`dynamodb_client`."""
        return self.dynamodb_client

"""Contract of the ``WebhookRegistry`` port (a tenant's registered webhook targets): the same cases on the in-memory
fake and the DynamoDB adapter (moto)."""

from __future__ import annotations

from typing import Any, cast

import boto3
import pytest

from shared.adapters.aws.webhook_registry import DynamoDBWebhookRegistry
from shared.adapters.in_memory.webhook_registry import InMemoryWebhookRegistry
from shared.webhooks.ports import WebhookRegistry
from tests.support.settings import REGION, TABLE


@pytest.fixture(params=["memory", "dynamodb"])
def registry(request: pytest.FixtureRequest) -> WebhookRegistry:
    if request.param == "memory":
        return InMemoryWebhookRegistry()
    request.getfixturevalue("aws")
    return DynamoDBWebhookRegistry(TABLE, lambda: cast(Any, boto3.client("dynamodb", region_name=REGION)))


async def test_a_tenant_without_registrations_has_no_targets(registry: WebhookRegistry) -> None:
    assert await registry.targets("tenant-1") == []


async def test_targets_are_read_back_in_order_and_replaced_whole(registry: WebhookRegistry) -> None:
    await registry.put_targets("tenant-1", ["https://a.example/h", "https://b.example/h"])
    assert await registry.targets("tenant-1") == ["https://a.example/h", "https://b.example/h"]
    await registry.put_targets("tenant-1", ["https://c.example/h"])
    assert await registry.targets("tenant-1") == ["https://c.example/h"]


async def test_tenants_do_not_see_each_others_targets(registry: WebhookRegistry) -> None:
    await registry.put_targets("tenant-1", ["https://a.example/h"])
    assert await registry.targets("tenant-2") == []


async def test_an_empty_list_removes_the_targets(registry: WebhookRegistry) -> None:
    await registry.put_targets("tenant-1", ["https://a.example/h"])
    await registry.put_targets("tenant-1", [])
    assert await registry.targets("tenant-1") == []
    await registry.put_targets("tenant-1", [])  # removing nothing is fine

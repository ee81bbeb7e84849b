"""DynamoDB adapter of the tenants' registered webhooks: one item per tenant on the main table,
``PK = T#{tenant}#WEBHOOKS``, ``SK = TARGETS``, holding the list of URLs (docs/storage.md); one GetItem per
delivery, one PutItem or DeleteItem per change."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from shared.adapters.aws import dynamo_codec as codec
from shared.models import utc_now


def _key(tenant_id: str) -> dict[str, Any]:
    return codec.to_item({"PK": f"T#{tenant_id}#WEBHOOKS", "SK": "TARGETS"})


class DynamoDBWebhookRegistry:
    def __init__(self, table_name: str, client: Callable[[], Any]) -> None:
        self._table = table_name
        self._make_client = client

    async def targets(self, tenant_id: str) -> list[str]:
        resp = await asyncio.to_thread(
            self._make_client().get_item, TableName=self._table, Key=_key(tenant_id), ConsistentRead=True
        )
        item = resp.get("Item")
        return list(codec.from_item(item).get("urls", [])) if item else []

    async def put_targets(self, tenant_id: str, urls: Sequence[str]) -> None:
        client = self._make_client()
        if not urls:
            await asyncio.to_thread(client.delete_item, TableName=self._table, Key=_key(tenant_id))
            return
        item = {
            **codec.from_item(_key(tenant_id)),
            "kind": "webhooks",
            "urls": list(urls),
            "updated_at": utc_now().isoformat(),
        }
        await asyncio.to_thread(client.put_item, TableName=self._table, Item=codec.to_item(item))
